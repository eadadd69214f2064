package routes

import "strings"

// Related reports whether two route templates (Route.Template) are
// equal, parent and child, or siblings (the same parent):
// "/channels/{channel_id}/messages" is related to
// "/channels/{channel_id}/messages/{message_id}" and to
// "/channels/{channel_id}/pins", not to
// "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me".
// Top-level templates are not siblings: "/gateway" is not related to
// "/guilds".
//
// Discord shares bucket hashes between related routes (a channel's
// messages and one message, a reaction's add and remove, the users of a
// reaction); unrelated ones (a message and a reaction on it, a member and
// a role) have their own. A route never answered may land in a related
// route's bucket, so its first request holds a slot in each related known
// bucket of its major; an unrelated bucket's window does not hold it.
func Related(a, b string) bool {
	pa, pb := parent(a), parent(b)
	return a == b || pa == pb && pa != "" || pa == b || a == pb
}

// parent is a template without its last segment ("" for a top-level one).
func parent(template string) string {
	if i := strings.LastIndexByte(template, '/'); i > 0 {
		return template[:i]
	}
	return ""
}
