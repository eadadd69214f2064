// Package routes turns an HTTP request aimed at Discord's REST API into the
// key of the rate-limit bucket it is charged to. It is the one place where
// Discord's routing quirks live.
//
// # Why a route is not a path
//
// Discord does not rate-limit paths. It rate-limits buckets, and a bucket is
// shared by every request whose route (method plus path with the ids blanked)
// maps to the same opaque X-RateLimit-Bucket hash and whose top-level
// ("major") parameter is the same. Until the first response reveals the hash,
// a limiter has to guess; [Parse] makes that guess:
//
//	DELETE /api/v10/channels/81/messages/99?reason=x
//	  Method   DELETE
//	  Template /channels/{channel_id}/messages/{message_id}
//	  Major    channel_id=81
//	  Key()    "DELETE /channels/{channel_id}/messages/{message_id} channel_id=81"
//
// Once the hash is known, [BucketKey] names the bucket itself, so two routes
// that Discord reports under one hash, with the same major, share one
// counter.
//
// # Rules
//
//   - Prefixes /api and /api/vN (N of 1 to 3 digits), a query string, a
//     fragment, repeated and trailing slashes are ignored; the spellings
//     ErrInvalidPath lists are refused.
//   - Major parameters are those Discord documents: channel_id and guild_id
//     when they are the top-level resource (/channels/{id}, /guilds/{id}),
//     webhook_id, and webhook_token when present. The token never appears in
//     a key: the major carries the first 16 hex digits of its SHA-256 instead.
//     Interaction paths are keyed per interaction (interaction_id).
//   - Webhook follow-ups (/webhooks/{application_id}/{interaction_token}/...)
//     are structurally webhook executions, so they are keyed per token, which
//     is how Discord limits them.
//   - Ids below the top level are not major: they become named placeholders
//     ({message_id}, {user_id}, {role_id}, ...), so every message of a channel
//     shares one bucket.
//   - Every emoji of a reaction route ("%F0%9F%91%8D", "name:id", raw UTF-8)
//     becomes {emoji}; "@me" and "@original" stay literal.
//   - The method is always part of the key, so DELETE message, which Discord
//     limits separately, never shares a bucket with GET message by accident.
//   - Unknown paths fall back to a generic rule: decimal snowflakes become
//     {id} (or a name derived from the preceding segment), everything else is
//     kept literally. Codes that are not numeric but identify a resource
//     (invite and template codes, activity instance ids) become placeholders
//     so they do not create one bucket each.
//   - POST /interactions/{interaction_id}/{interaction_token}/callback is
//     exempt from the global limit ([Route.GlobalExempt]).
//
// # Secrets
//
// Webhook and interaction tokens are credentials. They are hashed into
// [Route.Major], replaced by {token} in [Route.Redacted] and never copied into
// an error. Every exported field and method of [Route] is safe to log.
//
// # Failure modes
//
// Bad input is reported with an error wrapping [ErrInvalidPath] or
// [ErrInvalidMethod]; the error text describes the problem without repeating
// the input. Parse never panics (a fuzz target checks this) and is
// deterministic, so a key computed on one node equals the key computed on
// another.
package routes
