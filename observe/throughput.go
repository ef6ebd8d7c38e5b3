package observe

// Binding names the ceiling that bounds the fetch rate now.
type Binding string

const (
	BindingPoliteness Binding = "politeness" // Σ 1/interval over active domains is lower
	BindingCapacity   Binding = "capacity"   // max_concurrent_count ÷ mean service time is lower
)

// Ceilings are the two upper bounds of the fetch rate side by side (SPEC §6.3).
type Ceilings struct {
	// PolitenessCeilingPerSecond is Σ 1/min_interval over the active domains: the rate the
	// limiter would allow if every active domain were fetched as fast as it may be. Null
	// when an active domain has min_interval_ms = 0 (no bound) or none is active.
	PolitenessCeilingPerSecond *float64 `json:"politeness_ceiling_per_second"`
	// CapacityCeilingPerSecond is max_concurrent_count ÷ mean service time: the rate the
	// global cap allows. Null before any request has finished.
	CapacityCeilingPerSecond *float64 `json:"capacity_ceiling_per_second"`
	AchievedRatePerSecond    float64  `json:"achieved_rate_per_second"`
	// BindingCeiling is the lower of the two, null when neither is known.
	BindingCeiling *Binding `json:"binding_ceiling"`
}

// CeilingsOf puts the two ceilings and the achieved rate side by side.
func CeilingsOf(d DomainSummary, r Recent, maxConcurrentCount int) Ceilings {
	c := Ceilings{AchievedRatePerSecond: r.AchievedRatePerSecond}
	if d.ActiveDomainCount > 0 && d.UnboundedDomainCount == 0 {
		p := d.PolitenessSumPerSecond
		c.PolitenessCeilingPerSecond = &p
	}
	if r.MeanServiceMs != nil && *r.MeanServiceMs > 0 {
		cap := float64(maxConcurrentCount) / (*r.MeanServiceMs / 1000)
		c.CapacityCeilingPerSecond = &cap
	}
	var b Binding
	switch {
	case c.CapacityCeilingPerSecond == nil && c.PolitenessCeilingPerSecond == nil:
		return c
	case c.CapacityCeilingPerSecond == nil:
		b = BindingPoliteness
	case c.PolitenessCeilingPerSecond == nil:
		// Unbounded or no active domain: only the cap is left.
		b = BindingCapacity
	case *c.PolitenessCeilingPerSecond <= *c.CapacityCeilingPerSecond:
		b = BindingPoliteness
	default:
		b = BindingCapacity
	}
	c.BindingCeiling = &b
	return c
}
