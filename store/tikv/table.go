package tikv

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tikv/client-go/v2/txnkv/transaction"

	"downloader"
	"downloader/store/keys"
)

// # The table downloader:domain_runtime
//
//	downloader:domain_runtime:{domain}
//	    One domain's shared state, JSON (domainRecord): last_request_at and the instance
//	    that set it, the latest min_interval_ms and its source, and the requests admitted
//	    and not yet finished (in_flight), each with its instance and the moment it expires.
//	downloader:domain_runtime::loss
//	    The table's loss marker {loss_at}. A domain with no record is treated as requested
//	    at loss_at (SPEC §2, conservative rebuild). The marker is written when it is found
//	    missing: at the cluster's first start, or after the table was lost (its keys
//	    deleted), so every domain then waits one interval from that moment.
//	downloader:domain_runtime::instance:{instance_id}
//	    One instance's heartbeat (instanceRecord, membership.go): expires_at,
//	    in_flight_count, its share of the cap. An empty domain segment cannot be a domain,
//	    so these never collide.

// Key prefixes of the runtime table.
const (
	domainRuntimePrefix = "downloader:domain_runtime:"
	lossKey             = domainRuntimePrefix + ":loss"
	instancePrefix      = domainRuntimePrefix + ":instance:"
)

func domainKey(domain string) []byte { return []byte(domainRuntimePrefix + keys.EscapeDomain(domain)) }

// domainRecord is the value of downloader:domain_runtime:{domain}.
type domainRecord struct {
	LastRequestAt time.Time `json:"last_request_at"`
	// LastInstanceID set LastRequestAt, in its incarnation LastIncarnationID; "" when it is
	// the loss marker's (records written before incarnations have none: they count as
	// another process's).
	LastInstanceID    string     `json:"last_instance_id,omitempty"`
	LastIncarnationID uint64     `json:"last_incarnation_id,omitempty"`
	MinIntervalMs     int64      `json:"min_interval_ms"`
	IntervalSource    string     `json:"interval_source,omitempty"`
	InFlightRequests  []inFlight `json:"in_flight_requests,omitempty"`
}

// inFlight is one admitted request not yet written back.
type inFlight struct {
	InstanceID string `json:"instance_id"`
	// IncarnationID is the admitting process's (membership.go): an admission id is unique
	// within it, so (instance_id, incarnation, admission_id) names one request for ever.
	IncarnationID uint64    `json:"incarnation_id,omitempty"`
	AdmissionID   uint64    `json:"admission_id"`
	SlotAt        time.Time `json:"slot_at"`
	// WireAt is when the request went on the wire, once its instance wrote it back
	// (SharedTicket.Wired); zero until then. A wired entry no longer blocks the domain:
	// its moment is in last_request_at.
	WireAt time.Time `json:"wire_at,omitzero"`
	// ExpiresAt is when the request has gone on the wire or never will (its slot plus its
	// timeout plus slack, on its instance's clock).
	ExpiresAt time.Time `json:"expires_at"`
}

type lossRecord struct {
	LossAt time.Time `json:"loss_at"`
}

// badRecordError is a domain record that does not decode.
type badRecordError struct{ err error }

func (e *badRecordError) Error() string { return e.err.Error() }
func (e *badRecordError) Unwrap() error { return e.err }

// recordIn returns key's record from got (a BatchGet of txn); a missing record is one
// requested at the loss marker's moment (the marker is created at now when it is missing
// too). A record that does not decode is a *badRecordError.
func (r *Runtime) recordIn(ctx context.Context, txn *transaction.KVTxn, got map[string][]byte, key []byte, now time.Time) (domainRecord, error) {
	v, ok := got[string(key)]
	if !ok {
		lossAt, err := r.lossAt(ctx, txn, now)
		if err != nil {
			return domainRecord{}, err
		}
		return domainRecord{LastRequestAt: lossAt}, nil
	}
	var rec domainRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return rec, &badRecordError{fmt.Errorf("decode %s: %w", key, err)}
	}
	return rec, nil
}

// lossAt reads the loss marker in txn, writing it at now when it is missing.
func (r *Runtime) lossAt(ctx context.Context, txn *transaction.KVTxn, now time.Time) (time.Time, error) {
	v, err := txn.Get(ctx, []byte(lossKey))
	if err == nil {
		var l lossRecord
		if err := json.Unmarshal(v, &l); err != nil {
			return time.Time{}, fmt.Errorf("decode %s: %w", lossKey, err)
		}
		return l.LossAt, nil
	}
	if !isNotFound(err) {
		return time.Time{}, err
	}
	r.log.Warn("downloader:domain_runtime has no loss marker: the table is new or was lost; every domain waits one interval from now",
		"loss_at", now.UTC())
	b, _ := json.Marshal(lossRecord{LossAt: now.UTC()})
	if err := txn.Set([]byte(lossKey), b); err != nil {
		return time.Time{}, err
	}
	return now, nil
}

// foldExpired removes from rec.InFlightRequests the entries that expired (at ExpiresAt, plus the
// skew allowance when another instance wrote it): their requests went on the wire by then
// or never will, but when is unknown, so last_request_at moves to ExpiresAt, a wire moment
// no request of theirs can be later than, when that is later.
func (r *Runtime) foldExpired(rec *domainRecord, now time.Time) {
	kept := rec.InFlightRequests[:0]
	for _, f := range rec.InFlightRequests {
		end := f.ExpiresAt
		if !r.isMine(f.InstanceID, f.IncarnationID) {
			end = end.Add(r.skew())
		}
		if end.After(now) {
			kept = append(kept, f)
			continue
		}
		// A wired entry's moment is known (and already in last_request_at).
		sent := f.ExpiresAt
		if !f.WireAt.IsZero() {
			sent = f.WireAt
		}
		if sent.After(rec.LastRequestAt) {
			rec.LastRequestAt, rec.LastInstanceID, rec.LastIncarnationID = sent, f.InstanceID, f.IncarnationID
		}
	}
	rec.InFlightRequests = kept
}

func (r *Runtime) put(txn *transaction.KVTxn, key []byte, rec *domainRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return txn.Set(key, b)
}

// DomainRuntime is one domain's cluster-wide state in downloader:domain_runtime.
type DomainRuntime = downloader.ClusterDomain

// InFlightRequest is one admitted request not yet written back, as the cluster sees it.
type InFlightRequest = downloader.ClusterInFlight

// Domain returns domain's cluster-wide state.
func (r *Runtime) Domain(ctx context.Context, domain string) (DomainRuntime, error) {
	ctx, release, err := r.s.acquire(ctx, "domain runtime")
	if err != nil {
		return DomainRuntime{}, err
	}
	defer release()
	insts, err := r.instances(ctx)
	if err != nil {
		return DomainRuntime{}, unavailable("domain runtime", err)
	}
	now := r.clk.Now()
	live := map[string]bool{r.id: true}
	for _, in := range insts {
		if in.ExpiresAt.Add(r.skew()).After(now) {
			live[in.InstanceID] = true
		}
	}
	out := DomainRuntime{Domain: domain}
	v, ok, err := r.s.get(ctx, domainKey(domain))
	if err != nil {
		return out, unavailable("domain runtime", err)
	}
	if !ok {
		l, ok, err := r.s.get(ctx, []byte(lossKey))
		if err != nil {
			return out, unavailable("domain runtime", err)
		}
		if ok {
			var lr lossRecord
			if err := json.Unmarshal(l, &lr); err != nil {
				return out, fmt.Errorf("tikv runtime: decode %s: %w", lossKey, err)
			}
			out.LastRequestAt = lr.LossAt
		}
		return out, nil
	}
	var rec domainRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return out, fmt.Errorf("tikv runtime: decode %s: %w", domain, err)
	}
	out.IsStored = true
	out.MinIntervalMs, out.IntervalSource, out.LastRequestAt = rec.MinIntervalMs, rec.IntervalSource, rec.LastRequestAt
	out.LastInstanceID = rec.LastInstanceID
	out.InFlightRequests = []InFlightRequest{}
	for _, f := range rec.InFlightRequests {
		if !f.ExpiresAt.Add(r.skew()).After(now) {
			continue
		}
		e := InFlightRequest{InstanceID: f.InstanceID, SlotAt: f.SlotAt, ExpiresAt: f.ExpiresAt, IsInstanceLive: live[f.InstanceID]}
		if !f.WireAt.IsZero() {
			w := f.WireAt
			e.WireAt = &w
		}
		out.InFlightRequests = append(out.InFlightRequests, e)
		if live[f.InstanceID] {
			out.InFlightCount++
		}
	}
	return out, nil
}
