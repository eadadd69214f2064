package sluice

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/admission"
)

// Priority is a request's class when it waits for a limit. Wherever
// requests wait (their bucket's queue, a global window's line) a higher
// priority goes first; within one priority, requests go in the order they
// were submitted (and a hot channel's backlog first, as without
// priorities). A lower priority is never starved: while its requests
// wait, at least one request in eight that the bucket or the window sends
// is of a lower priority (the oldest waiting, whatever its priority).
// Priorities never send a request earlier than the limits allow: they
// only choose which waiting request goes next. docs/priorities.md has the
// rule and its measurements.
//
// The zero value is PriorityNormal: requests sent without WithPriority.
type Priority int8

// The priorities, lowest first.
const (
	// PriorityBulk is work that may wait for everything else: mass role
	// updates, moderation sweeps, migrations, backfills.
	PriorityBulk = Priority(admission.Bulk)
	// PriorityNormal is the default.
	PriorityNormal = Priority(admission.Normal)
	// PriorityInteractive is what a user is waiting for: the follow-up of
	// an interaction, the edit of its response, the reply to a command.
	PriorityInteractive = Priority(admission.Interactive)
)

// String returns "interactive", "normal" or "bulk" (or "priority(N)" for
// a value that is none of them).
func (p Priority) String() string {
	if !p.Valid() {
		return fmt.Sprintf("priority(%d)", int8(p))
	}
	return admission.Class(p).String()
}

// Valid reports whether p is one of PriorityBulk, PriorityNormal and
// PriorityInteractive.
func (p Priority) Valid() bool { return admission.Class(p).Valid() }

// ParsePriority reads a priority's name as String writes it, in any case
// and with surrounding spaces ignored; "" is PriorityNormal. Any other
// value is an error matching ErrBadRequest (the value itself is not
// quoted in it: it may come from a client).
func ParsePriority(s string) (Priority, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return PriorityNormal, nil
	}
	for _, c := range admission.Classes {
		if strings.EqualFold(s, c.String()) {
			return Priority(c), nil
		}
	}
	return PriorityNormal, fmt.Errorf("%w: unknown priority (want interactive, normal or bulk)", ErrBadRequest)
}

type priorityKey struct{}

// WithPriority returns a context whose requests wait at priority p (see
// Priority); it replaces a priority ctx had. A request sent with a
// priority that is not one of the three fails at once with an error
// matching ErrBadRequest, and is not sent.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

// PriorityFrom returns the priority WithPriority set on ctx
// (PriorityNormal if none).
func PriorityFrom(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}
