package downloader

import (
	"slices"
	"strings"
	"time"
)

// ResourceType is a kind of sub-request a rendered page makes, as the browser classes it
// (SPEC §7 spelling of the CDP Network.ResourceType names). The main document is not one:
// a render cannot skip its own page; nor are WebSockets, which the browser's request
// interception never sees.
type ResourceType string

// The resource types a render can be told to skip.
const (
	ResourceStylesheet  ResourceType = "stylesheet"
	ResourceImage       ResourceType = "image"
	ResourceMedia       ResourceType = "media"
	ResourceFont        ResourceType = "font"
	ResourceScript      ResourceType = "script"
	ResourceTextTrack   ResourceType = "text_track"
	ResourceXHR         ResourceType = "xhr"
	ResourceFetch       ResourceType = "fetch"
	ResourcePrefetch    ResourceType = "prefetch"
	ResourceEventSource ResourceType = "event_source"
	ResourceManifest    ResourceType = "manifest"
	ResourcePing        ResourceType = "ping"
	ResourceOther       ResourceType = "other"
)

// ResourceTypes is the closed set of ResourceType, in a fixed order.
var ResourceTypes = []ResourceType{
	ResourceStylesheet, ResourceImage, ResourceMedia, ResourceFont, ResourceScript,
	ResourceTextTrack, ResourceXHR, ResourceFetch, ResourcePrefetch, ResourceEventSource,
	ResourceManifest, ResourcePing, ResourceOther,
}

// DefaultSkipResourceTypes is what a render skips unless told otherwise: what a text
// crawl never reads (images, audio and video, web fonts). Stylesheets stay: innerText
// needs them to know what is hidden.
func DefaultSkipResourceTypes() []ResourceType {
	return []ResourceType{ResourceImage, ResourceMedia, ResourceFont}
}

// ParseResourceTypes validates a list of resource type names for field. The result is
// never nil, so that an empty list (skip nothing) stays apart from an absent one (nil:
// the renderer's default); duplicates are dropped.
func ParseResourceTypes(field string, names []string) ([]ResourceType, error) {
	out := make([]ResourceType, 0, len(names))
	for _, n := range names {
		t := ResourceType(n)
		if !slices.Contains(ResourceTypes, t) {
			if n == "document" {
				return nil, Invalidf(field, "%s: a render cannot skip its own document", field)
			}
			names := make([]string, len(ResourceTypes))
			for i, r := range ResourceTypes {
				names[i] = string(r)
			}
			return nil, Invalidf(field, "%s: unknown resource type %q (one of %s)", field, n, strings.Join(names, ", "))
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// RenderOptions are the per-request choices of one render.
type RenderOptions struct {
	Timeout time.Duration // zero: the renderer's default
	// SkipResourceTypes are the sub-requests the page may not make: nil means the
	// renderer's default (DefaultSkipResourceTypes unless configured otherwise), an empty
	// non-nil list loads everything.
	SkipResourceTypes []ResourceType
	// Headers are the request's allow-listed headers (RequestHeaders), sent with the main
	// document (SPEC §5).
	Headers RequestHeaders
}

// FetchOptions are what a plain fetch asks of the wire beyond its URL.
type FetchOptions struct {
	// Headers are the request's allow-listed headers (RequestHeaders), sent on every hop to
	// the request's own host and, but for Cookie, on hops to other hosts.
	Headers RequestHeaders
	// IsOnce asks the origin to close the connection after the answer and keeps it out of
	// the idle pool: an entry C probe is one GET of a domain among many.
	IsOnce bool
	// Conditional, when not zero, are the validators of the page stored for this URL: the
	// first request sends them (If-None-Match, If-Modified-Since), and a 304 to it is a
	// success with health_signal.is_not_modified (SPEC §4).
	Conditional Validators
}
