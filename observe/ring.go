package observe

import "time"

// ring keeps one T per bucket of width span over the last len(slots) buckets: a rolling
// window in fixed memory. Buckets are aligned to the Unix epoch, so every ring of one
// width turns over at the same instants. Not safe for concurrent use: the owner's lock
// guards it.
type ring[T any] struct {
	span  time.Duration
	slots []ringSlot[T]
}

type ringSlot[T any] struct {
	bucket int64 // bucket number + 1; 0: never written
	v      T
}

func newRing[T any](span time.Duration, n int) ring[T] {
	return ring[T]{span: span, slots: make([]ringSlot[T], n)}
}

// bucketOf returns the bucket number of t.
func (r *ring[T]) bucketOf(t time.Time) int64 {
	ns := t.UnixNano()
	b := ns / int64(r.span)
	if ns < 0 && ns%int64(r.span) != 0 {
		b--
	}
	return b
}

// at returns the value of now's bucket, cleared first if its slot held an older bucket.
func (r *ring[T]) at(now time.Time) *T {
	b := r.bucketOf(now)
	s := &r.slots[mod(b, len(r.slots))]
	if s.bucket != b+1 {
		var zero T
		s.bucket, s.v = b+1, zero
	}
	return &s.v
}

// each calls f with the value of every bucket of the window ending with now's bucket
// (the current, partial bucket included), oldest first.
func (r *ring[T]) each(now time.Time, f func(*T)) {
	b := r.bucketOf(now)
	n := int64(len(r.slots))
	for k := b - n + 1; k <= b; k++ {
		s := &r.slots[mod(k, len(r.slots))]
		if s.bucket == k+1 {
			f(&s.v)
		}
	}
}

// buckets calls f with the start of every bucket of the window ending with now's bucket,
// oldest first, and its value, or nil for a bucket nothing was written to.
func (r *ring[T]) buckets(now time.Time, f func(start time.Time, v *T)) {
	b := r.bucketOf(now)
	n := int64(len(r.slots))
	for k := b - n + 1; k <= b; k++ {
		s := &r.slots[mod(k, len(r.slots))]
		var v *T
		if s.bucket == k+1 {
			v = &s.v
		}
		f(time.Unix(0, k*int64(r.span)).UTC(), v)
	}
}

func mod(b int64, n int) int {
	m := b % int64(n)
	if m < 0 {
		m += int64(n)
	}
	return int(m)
}
