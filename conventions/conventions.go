// Package conventions checks the project's names against the naming convention of SPEC §7
// (CONVENTION.md as the seeds apply it): JSON fields, log fields, flags (config keys),
// metric names and labels alike.
//
// It reads Go source with go/ast only (no type checker, so it runs in a second and does
// not depend on the rest of the tree compiling). What it can see:
//
//   - JSON: every struct field tag json:"name"; the field's Go type tells booleans,
//     numbers, durations and instants apart.
//   - Logs: the keys of log/slog calls (Info, Warn, ..., Log, LogAttrs, With) and of
//     slog.String/Int/Bool/Duration/Time/Any/... attributes anywhere.
//   - Flags: the names given to a flag.FlagSet's XxxVar, Var and Xxx methods.
//   - Metrics: prometheus.CounterOpts/GaugeOpts/HistogramOpts/SummaryOpts literals (with
//     their Namespace and Subsystem), prometheus.NewDesc names, and the label names of
//     New...Vec and NewDesc.
//
// The rules are in Check. Test files and testdata directories are not part of the project.
// A JSON field whose name belongs to another system is marked with a comment holding
// ExternalDirective ("naming:external: Chrome's /json/version").
package conventions

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Kind is where a name is used.
type Kind string

const (
	KindJSON   Kind = "json"
	KindLog    Kind = "log"
	KindFlag   Kind = "flag"
	KindMetric Kind = "metric"
	KindLabel  Kind = "label"
)

// ValueType is what the checker knows of a name's value.
type ValueType string

const (
	TypeUnknown  ValueType = ""
	TypeBool     ValueType = "bool"
	TypeInt      ValueType = "int"
	TypeFloat    ValueType = "float"
	TypeString   ValueType = "string"
	TypeDuration ValueType = "duration" // time.Duration
	TypeTime     ValueType = "time"     // time.Time
	TypeOther    ValueType = "other"    // a slice, map, struct, ...
)

// Metric types.
const (
	MetricCounter   = "counter"
	MetricGauge     = "gauge"
	MetricHistogram = "histogram"
	MetricSummary   = "summary"
)

// Name is one name found in the source.
type Name struct {
	Kind   Kind
	Name   string
	Type   ValueType
	Metric string // the metric type, when known
	GoName string // the Go field name of a JSON field
	Pos    token.Position
}

// Violation is a name that breaks a rule.
type Violation struct {
	Name    Name
	Rule    string
	Message string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s:%d: %s %q: %s (%s)", v.Name.Pos.Filename, v.Name.Pos.Line, v.Name.Kind, v.Name.Name, v.Message, v.Rule)
}

// CheckDir collects the names of every Go file under root and checks them.
func CheckDir(root string) ([]Violation, error) {
	names, err := Collect(root)
	if err != nil {
		return nil, err
	}
	return Check(names), nil
}

// Collect parses every non-test Go file under root (skipping testdata, vendor and hidden
// directories, unless root itself is one) and returns the names it uses, in file order.
func Collect(root string) ([]Name, error) {
	dirs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			base := d.Name()
			if path != root && (base == "testdata" || base == "vendor" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, err)
	}
	keys := make([]string, 0, len(dirs))
	for k := range dirs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var names []Name
	for _, dir := range keys {
		fset := token.NewFileSet()
		var files []*ast.File
		for _, path := range dirs[dir] {
			src, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", path, err)
			}
			f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution|parser.ParseComments)
			if err != nil {
				return nil, fmt.Errorf("parse %s: %w", path, err)
			}
			files = append(files, f)
		}
		c := &collector{fset: fset, consts: stringConsts(files), seen: map[token.Pos]bool{},
			flagLike: regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_-]*$`)}
		for _, f := range files {
			c.file(f)
		}
		names = append(names, c.names...)
	}
	return names, nil
}

// stringConsts maps the package's string constants to their values, so that a metric
// Namespace given as a constant is resolved.
func stringConsts(files []*ast.File) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if s, ok := stringLit(vs.Values[i]); ok {
							out[n.Name] = s
						}
					}
				}
			}
		}
	}
	return out
}

type collector struct {
	fset   *token.FileSet
	consts map[string]string
	names  []Name
	seen   map[token.Pos]bool // slog attribute calls already taken as keys
	// flagLike tells a flag name from other string arguments of methods named like flag's.
	flagLike *regexp.Regexp
}

func (c *collector) add(n Name, pos token.Pos) {
	n.Pos = c.fset.Position(pos)
	c.names = append(c.names, n)
}

func (c *collector) file(f *ast.File) {
	ast.Inspect(f, func(node ast.Node) bool {
		switch n := node.(type) {
		case *ast.StructType:
			c.structType(n)
		case *ast.CallExpr:
			c.call(n)
		case *ast.CompositeLit:
			c.metricOpts(n, nil)
		}
		return true
	})
}

// structType collects json tags.
func (c *collector) structType(st *ast.StructType) {
	for _, field := range st.Fields.List {
		if field.Tag == nil || isExternal(field) {
			continue
		}
		tag, err := strconv.Unquote(field.Tag.Value)
		if err != nil {
			continue
		}
		v, ok := reflectTagLookup(tag, "json")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(v, ",")
		if name == "-" {
			continue
		}
		goName := ""
		if len(field.Names) > 0 {
			goName = field.Names[0].Name
		}
		if name == "" {
			if goName == "" {
				continue // an embedded struct, flattened
			}
			name = goName // encoding/json uses the Go name
		}
		c.add(Name{Kind: KindJSON, Name: name, Type: typeOf(field.Type), GoName: goName}, field.Pos())
	}
}

// ExternalDirective, in a struct field's comment, marks a JSON name that another system
// owns (a browser's DevTools endpoint, a third-party API): the convention does not apply.
// Say whose name it is after it.
const ExternalDirective = "naming:external"

func isExternal(f *ast.Field) bool {
	for _, g := range []*ast.CommentGroup{f.Doc, f.Comment} {
		if g != nil && strings.Contains(g.Text(), ExternalDirective) {
			return true
		}
	}
	return false
}

// reflectTagLookup is reflect.StructTag.Lookup without reflect.
func reflectTagLookup(tag, key string) (string, bool) {
	for tag != "" {
		tag = strings.TrimLeft(tag, " ")
		i := strings.IndexByte(tag, ':')
		if i <= 0 || i+1 >= len(tag) || tag[i+1] != '"' {
			return "", false
		}
		name := tag[:i]
		rest := tag[i+1:]
		j := 1
		for j < len(rest) && rest[j] != '"' {
			if rest[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(rest) {
			return "", false
		}
		val, err := strconv.Unquote(rest[:j+1])
		if err != nil {
			return "", false
		}
		if name == key {
			return val, true
		}
		tag = rest[j+1:]
	}
	return "", false
}

// typeOf classifies a Go type expression.
func typeOf(e ast.Expr) ValueType {
	switch t := e.(type) {
	case *ast.StarExpr:
		return typeOf(t.X)
	case *ast.Ident:
		switch t.Name {
		case "bool":
			return TypeBool
		case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
			return TypeInt
		case "float32", "float64":
			return TypeFloat
		case "string":
			return TypeString
		}
	case *ast.SelectorExpr:
		if x, ok := t.X.(*ast.Ident); ok && x.Name == "time" {
			switch t.Sel.Name {
			case "Duration":
				return TypeDuration
			case "Time":
				return TypeTime
			}
		}
	case *ast.ArrayType, *ast.MapType, *ast.StructType:
		return TypeOther
	}
	return TypeUnknown
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

// str resolves a string literal or a constant of the package.
func (c *collector) str(e ast.Expr) (string, bool) {
	if s, ok := stringLit(e); ok {
		return s, true
	}
	if id, ok := e.(*ast.Ident); ok {
		s, ok := c.consts[id.Name]
		return s, ok
	}
	return "", false
}

func selector(e ast.Expr) (pkg, name string, ok bool) {
	se, isSel := e.(*ast.SelectorExpr)
	if !isSel {
		return "", "", false
	}
	if id, isID := se.X.(*ast.Ident); isID {
		return id.Name, se.Sel.Name, true
	}
	return "", se.Sel.Name, true
}

// slogAttrTypes are the slog attribute constructors and the type each one logs.
func slogAttrType(name string) (ValueType, bool) {
	switch name {
	case "String":
		return TypeString, true
	case "Int", "Int64", "Uint64":
		return TypeInt, true
	case "Float64":
		return TypeFloat, true
	case "Bool":
		return TypeBool, true
	case "Duration":
		return TypeDuration, true
	case "Time":
		return TypeTime, true
	case "Any", "Group":
		return TypeUnknown, true
	}
	return "", false
}

// logArgsStart returns where the key-value arguments of a slog call start, or -1.
func logArgsStart(method string, args []ast.Expr) int {
	msgAt := -1
	switch method {
	case "Debug", "Info", "Warn", "Error":
		msgAt = 0
	case "DebugContext", "InfoContext", "WarnContext", "ErrorContext":
		msgAt = 1
	case "Log", "LogAttrs":
		msgAt = 2
	case "With":
		return 0
	default:
		return -1
	}
	if len(args) <= msgAt {
		return -1
	}
	if _, ok := stringLit(args[msgAt]); !ok {
		return -1
	}
	return msgAt + 1
}

func (c *collector) call(call *ast.CallExpr) {
	pkg, method, ok := selector(call.Fun)
	if !ok {
		return
	}
	// slog.String("key", v) and friends, anywhere.
	if pkg == "slog" {
		if t, ok := slogAttrType(method); ok && len(call.Args) > 0 {
			if key, ok := stringLit(call.Args[0]); ok && !c.seen[call.Pos()] {
				c.seen[call.Pos()] = true
				c.add(Name{Kind: KindLog, Name: key, Type: t}, call.Args[0].Pos())
			}
			return
		}
	}
	// Key-value pairs of a logging call.
	if start := logArgsStart(method, call.Args); start >= 0 {
		args := call.Args[start:]
		for i := 0; i < len(args); i++ {
			key, ok := stringLit(args[i])
			if !ok {
				continue // an slog.Attr: collected as a call above
			}
			var t ValueType
			if i+1 < len(args) {
				t = exprType(args[i+1])
			}
			c.add(Name{Kind: KindLog, Name: key, Type: t}, args[i].Pos())
			i++
		}
		return
	}
	if pkg != "slog" {
		c.flag(method, call)
	}
	switch {
	case pkg == "prometheus" && strings.HasPrefix(method, "New") && strings.HasSuffix(method, "Vec") && len(call.Args) == 2:
		if cl, ok := call.Args[0].(*ast.CompositeLit); ok {
			c.metricOpts(cl, call.Args[1])
		}
	case pkg == "prometheus" && method == "NewDesc" && len(call.Args) >= 3:
		if name, ok := c.fqName(call.Args[0]); ok {
			c.add(Name{Kind: KindMetric, Name: name}, call.Args[0].Pos())
		}
		c.labels(call.Args[2])
	}
}

// exprType guesses the type of a logged value from its expression.
func exprType(e ast.Expr) ValueType {
	switch v := e.(type) {
	case *ast.Ident:
		if v.Name == "true" || v.Name == "false" {
			return TypeBool
		}
		if isBoolName(v.Name) {
			return TypeBool
		}
	case *ast.UnaryExpr:
		if v.Op == token.NOT {
			return TypeBool
		}
	case *ast.BinaryExpr:
		switch v.Op {
		case token.EQL, token.NEQ, token.LSS, token.LEQ, token.GTR, token.GEQ, token.LAND, token.LOR:
			return TypeBool
		}
	case *ast.SelectorExpr:
		if isBoolName(v.Sel.Name) {
			return TypeBool
		}
	case *ast.CallExpr:
		pkg, name, _ := selector(v.Fun)
		switch {
		case pkg == "time" && (name == "Since" || name == "Until" || name == "Duration"):
			return TypeDuration
		case name == "Sub":
			return TypeDuration
		case pkg == "time" && name == "Now", name == "UTC":
			return TypeTime
		case name == "Milliseconds" || name == "Seconds":
			return TypeInt
		}
	case *ast.BasicLit:
		switch v.Kind {
		case token.INT:
			return TypeInt
		case token.FLOAT:
			return TypeFloat
		case token.STRING:
			return TypeString
		}
	}
	return TypeUnknown
}

// isBoolName tells a Go name that reads as a boolean (IsUp, hasX, ShouldRender).
func isBoolName(n string) bool {
	for _, p := range []string{"Is", "Has", "Should", "is", "has", "should"} {
		if strings.HasPrefix(n, p) && len(n) > len(p) && n[len(p)] >= 'A' && n[len(p)] <= 'Z' {
			return true
		}
	}
	return false
}

// flag collects flag names from flag.FlagSet (or package flag) methods.
func (c *collector) flag(method string, call *ast.CallExpr) {
	at, t := -1, TypeUnknown
	switch method {
	case "StringVar", "IntVar", "Int64Var", "UintVar", "Uint64Var", "Float64Var", "BoolVar", "DurationVar", "Var", "TextVar":
		at = 1
	case "String", "Int", "Int64", "Uint", "Uint64", "Float64", "Bool", "Duration", "Func", "BoolFunc":
		at = 0
	default:
		return
	}
	switch strings.TrimSuffix(method, "Var") {
	case "Bool", "BoolFunc":
		t = TypeBool
	case "Int", "Int64", "Uint", "Uint64":
		t = TypeInt
	case "Float64":
		t = TypeFloat
	case "String":
		t = TypeString
	case "Duration":
		t = TypeDuration
	}
	if len(call.Args) <= at+1 {
		return // flag methods take a name and a usage at least
	}
	name, ok := stringLit(call.Args[at])
	if !ok || !c.flagLike.MatchString(name) {
		return
	}
	c.add(Name{Kind: KindFlag, Name: name, Type: t}, call.Args[at].Pos())
}

// metricOpts collects a prometheus.XxxOpts literal's name, and labels when it is the
// first argument of a New...Vec call.
func (c *collector) metricOpts(cl *ast.CompositeLit, labels ast.Expr) {
	pkg, typ, ok := selector(cl.Type)
	if !ok || pkg != "prometheus" {
		return
	}
	var kind string
	switch typ {
	case "CounterOpts":
		kind = MetricCounter
	case "GaugeOpts":
		kind = MetricGauge
	case "HistogramOpts":
		kind = MetricHistogram
	case "SummaryOpts":
		kind = MetricSummary
	default:
		return
	}
	if c.seen[cl.Pos()] {
		if labels != nil {
			c.labels(labels)
		}
		return
	}
	c.seen[cl.Pos()] = true
	var parts [3]string
	for _, elt := range cl.Elts {
		kv, ok := elt.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		key, _ := kv.Key.(*ast.Ident)
		if key == nil {
			continue
		}
		v, _ := c.str(kv.Value)
		switch key.Name {
		case "Namespace":
			parts[0] = v
		case "Subsystem":
			parts[1] = v
		case "Name":
			parts[2] = v
		}
	}
	if parts[2] != "" {
		c.add(Name{Kind: KindMetric, Name: joinNonEmpty(parts[:]), Metric: kind}, cl.Pos())
	}
	if labels != nil {
		c.labels(labels)
	}
}

// fqName resolves a NewDesc name: a literal, a constant or prometheus.BuildFQName(...).
func (c *collector) fqName(e ast.Expr) (string, bool) {
	if s, ok := c.str(e); ok {
		return s, true
	}
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return "", false
	}
	if _, name, _ := selector(call.Fun); name != "BuildFQName" || len(call.Args) != 3 {
		return "", false
	}
	var parts []string
	for _, a := range call.Args {
		s, ok := c.str(a)
		if !ok {
			return "", false
		}
		parts = append(parts, s)
	}
	return joinNonEmpty(parts), true
}

func joinNonEmpty(parts []string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "_")
}

// labels collects the names of a []string{...} literal.
func (c *collector) labels(e ast.Expr) {
	cl, ok := e.(*ast.CompositeLit)
	if !ok {
		return
	}
	for _, elt := range cl.Elts {
		if s, ok := c.str(elt); ok {
			c.add(Name{Kind: KindLabel, Name: s}, elt.Pos())
		}
	}
}

// The rules.

// aliases are names that stand for a concept that already has its one name (SPEC §7).
func aliases() map[string]string {
	return map[string]string{
		"status_code": "http_status", "statuscode": "http_status", "http_code": "http_status",
		"response_code": "http_status", "http_status_code": "http_status", "status_http": "http_status",
		"reached": "has_reached_origin", "reached_origin": "has_reached_origin", "is_reached": "has_reached_origin",
		"render": "should_render", "rendered": "should_render", "is_render": "should_render",
		"store": "should_store", "stored": "should_store",
		"failure_reason": "fail_reason", "fail_cause": "fail_reason", "error_reason": "fail_reason",
		"retry_after": "retry_after_seconds", "retry_after_ms": "retry_after_seconds",
		"max_concurrency": "max_concurrent_count", "concurrency": "max_concurrent_count",
		"min_interval": "min_interval_ms", "interval_ms": "min_interval_ms",
		"in_flight": "in_flight_count", "inflight": "in_flight_count", "inflight_count": "in_flight_count",
	}
}

// rules are the patterns and word lists of Check.
type rules struct {
	snakeCase, kebabCase *regexp.Regexp
	windowed             *regexp.Regexp // request_count_24h: a window after _count (refused)
	aliases              map[string]string
	boolPrefixes         []string
	durationWords        []string // a last word that needs a unit after it
	instantWords         []string // a last word that should be _at
	countNouns           []string // a plural that should be _count
	numericSuffixes      []string
	idWords              []string // numbers that are names, not quantities
}

func newRules() *rules {
	return &rules{
		snakeCase:       regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`),
		kebabCase:       regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`),
		windowed:        regexp.MustCompile(`_count_[0-9]+[hdm]$`),
		aliases:         aliases(),
		boolPrefixes:    []string{"has", "should", "is"},
		durationWords:   []string{"duration", "elapsed", "timeout", "interval", "delay", "latency", "wait", "took", "ttl", "age", "backoff", "grace", "period", "uptime"},
		instantWords:    []string{"time", "timestamp", "date", "when", "deadline", "expiry", "expires", "since", "until"},
		countNouns:      []string{"requests", "domains", "probes", "renders", "fetches", "triggers", "restarts", "retries", "tasks", "errors", "failures", "items", "pages", "hits", "misses", "attempts", "redirects", "tabs", "events", "samples", "slots", "workers"},
		numericSuffixes: []string{"_count", "_ms", "_seconds", "_bytes", "_length", "_ratio", "_percent", "_per_second"},
		idWords:         []string{"id", "seq", "index", "version", "port", "generation"},
	}
}

// Check applies SPEC §7 to every name:
//
//   - case: snake_case (flags: kebab-case, checked in their snake form below);
//   - one name per concept: a known alias (status_code, reached, render, in_flight, ...) is
//     refused in favour of the name of record (http_status, has_reached_origin, ...);
//   - booleans carry a prefix has_, should_ or is_;
//   - counts end in _count (a window goes before it: request_24h_count), and any number carries
//     its unit or kind (_count, _ms, _seconds, _bytes, _length, _ratio, _per_second, ...);
//   - durations carry their unit (_ms, _seconds), never a bare time.Duration, which JSON and
//     slog write as nanoseconds;
//   - instants end in _at and instant-typed values are named so;
//   - JSON: the Go field reads as its tag (HasReachedOrigin ↔ has_reached_origin);
//   - metrics: a downloader_ prefix, counters end in _total, histograms in _seconds or
//     _bytes, gauges in _count, _seconds, _bytes, _ratio or _info, or carry is_/has_.
func Check(names []Name) []Violation {
	r := newRules()
	var out []Violation
	for _, n := range names {
		out = append(out, r.check(n)...)
	}
	return out
}

func (r *rules) check(n Name) []Violation {
	var out []Violation
	bad := func(rule, format string, args ...any) {
		out = append(out, Violation{Name: n, Rule: rule, Message: fmt.Sprintf(format, args...)})
	}
	name := n.Name
	if n.Kind == KindFlag {
		if !r.kebabCase.MatchString(name) {
			bad("case", "flags are kebab-case (--max-concurrent-count)")
			return out
		}
		name = strings.ReplaceAll(name, "-", "_")
	} else if !r.snakeCase.MatchString(name) {
		bad("case", "names are snake_case")
		return out
	}
	tokens := strings.Split(name, "_")
	last := tokens[len(tokens)-1]

	// One name per concept.
	al := r.aliases
	if want, ok := al[name]; ok {
		bad("one_name", "this concept is called %s everywhere", want)
	} else if n.Kind != KindMetric {
		for alias, want := range al {
			if strings.Contains(alias, "_") && strings.HasSuffix(name, "_"+alias) && !strings.HasSuffix(name, want) {
				bad("one_name", "this concept is called %s everywhere", want)
				break
			}
		}
	}

	if n.Kind == KindMetric {
		out = append(out, checkMetric(n, name, tokens)...)
		return out
	}
	if n.Kind == KindLabel {
		return out
	}

	// Booleans.
	if n.Type == TypeBool && !slices.Contains(r.boolPrefixes, tokens[0]) {
		bad("bool_prefix", "booleans start with has_, should_ or is_ (has_reached_origin, not reached)")
	}
	// Durations.
	if n.Type == TypeDuration {
		bad("duration_unit", "a time.Duration is written in nanoseconds without a unit: use an integer with _ms or _seconds")
	} else if slices.Contains(r.durationWords, last) {
		bad("duration_unit", "durations carry their unit: %s_ms or %s_seconds", name, name)
	}
	// Instants.
	isAt := last == "at"
	switch {
	case n.Type == TypeTime && !isAt:
		bad("instant_at", "instants end in _at (RFC 3339, UTC)")
	case n.Type != TypeTime && slices.Contains(r.instantWords, last):
		bad("instant_at", "instants end in _at")
	case isAt && (n.Type == TypeInt || n.Type == TypeFloat || n.Type == TypeBool || n.Type == TypeDuration):
		bad("instant_at", "_at names an instant (RFC 3339), not a %s", n.Type)
	}
	// Counts and other numbers.
	if n.Type == TypeInt || n.Type == TypeFloat {
		switch {
		case slices.Contains(r.countNouns, last):
			bad("count_suffix", "counts end in _count (%s_count)", strings.TrimSuffix(name, "s"))
		case r.windowed.MatchString(name):
			i := strings.LastIndex(name, "_count_")
			bad("count_suffix", "counts end in _count, a window before it: %s_%s_count", name[:i], name[i+len("_count_"):])
		case name == "http_status" || slices.Contains(r.idWords, last):
		case !hasAnySuffix(name, r.numericSuffixes):
			bad("count_suffix", "a number carries its kind or unit: counts end in _count, durations in _ms or _seconds (%s)", strings.Join(r.numericSuffixes, ", "))
		}
	}
	// JSON: the Go name reads as the tag.
	if n.Kind == KindJSON && n.GoName != "" && snakeOf(n.GoName) != name {
		bad("go_name", "the Go field %s reads as %q: name one after the other", n.GoName, snakeOf(n.GoName))
	}
	return out
}

func checkMetric(n Name, name string, tokens []string) []Violation {
	var out []Violation
	bad := func(rule, format string, args ...any) {
		out = append(out, Violation{Name: n, Rule: rule, Message: fmt.Sprintf(format, args...)})
	}
	if tokens[0] != "downloader" {
		bad("metric_prefix", "metrics start with downloader_")
	}
	hasBool := false
	for _, t := range tokens[1:] {
		if t == "is" || t == "has" {
			hasBool = true
		}
	}
	switch n.Metric {
	case MetricCounter:
		if !strings.HasSuffix(name, "_total") {
			bad("metric_suffix", "counters end in _total")
		} else if strings.HasSuffix(name, "_count_total") {
			bad("metric_suffix", "a counter is already a count: drop _count before _total")
		}
	case MetricHistogram, MetricSummary:
		if !hasAnySuffix(name, []string{"_seconds", "_bytes"}) {
			bad("metric_suffix", "histograms carry their unit: _seconds or _bytes")
		}
	case MetricGauge:
		if !hasBool && !hasAnySuffix(name, []string{"_count", "_seconds", "_bytes", "_ratio", "_info"}) {
			bad("metric_suffix", "gauges end in _count, _seconds, _bytes, _ratio or _info, or read as a boolean (_is_up)")
		}
	default:
		if !hasBool && !hasAnySuffix(name, []string{"_total", "_count", "_seconds", "_bytes", "_ratio", "_info"}) {
			bad("metric_suffix", "metric names end in _total, _count, _seconds, _bytes, _ratio or _info, or read as a boolean")
		}
	}
	for _, t := range tokens {
		if slices.Contains([]string{"ms", "milliseconds", "minutes", "hours"}, t) {
			bad("metric_unit", "Prometheus metrics use base units: _seconds")
		}
	}
	return out
}

func hasAnySuffix(s string, suffixes []string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// snakeOf turns a Go name into snake_case, keeping initialisms and digit runs together:
// HasReachedOrigin → has_reached_origin, HTTPStatus → http_status, XHRCount → xhr_count,
// Request24hCount → request_24h_count, TaskID → task_id.
func snakeOf(s string) string {
	var b strings.Builder
	r := []rune(s)
	isUpper := func(c rune) bool { return c >= 'A' && c <= 'Z' }
	isLower := func(c rune) bool { return c >= 'a' && c <= 'z' }
	isDigit := func(c rune) bool { return c >= '0' && c <= '9' }
	for i, c := range r {
		if i > 0 {
			prev := r[i-1]
			switch {
			case isUpper(c) && (isLower(prev) || isDigit(prev)):
				b.WriteByte('_')
			case isUpper(c) && isUpper(prev) && i+1 < len(r) && isLower(r[i+1]):
				b.WriteByte('_')
			case isDigit(c) && !isDigit(prev):
				b.WriteByte('_')
			}
		}
		b.WriteRune(c)
	}
	return strings.ToLower(b.String())
}
