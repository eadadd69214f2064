package admission

// SetSlotHook has q tell f each slot Serve hands out, in order (the
// grants merge a bucket's slots of one call: the share is seen here).
func SetSlotHook[K comparable](q *Queue[K], f func(key K)) { q.onSlot = f }
