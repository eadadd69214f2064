package admission

// SetSlotHook has q tell f each slot Serve hands out, in order (the
// grants merge a bucket's slots of one call: the share is seen here).
func SetSlotHook[K comparable](q *Queue[K], f func(key K)) { q.onSlot = f }

// Places is every waiting bucket's place (nil for an empty line).
func (q *Queue[K]) Places() map[K]Place {
	if len(q.ring) == 0 {
		return nil
	}
	out := make(map[K]Place, len(q.ring))
	for _, e := range q.ring {
		out[e.key] = e.place
	}
	return out
}
