// Package proxy is a rate-limited gateway to Discord's HTTP API: an
// http.Handler that any bot, in any language, reaches by changing only its
// API base URL (http://HOST:PORT/api/v10), and that sends every request
// through one sluice.Limiter per token. The sluice command serves it as
// "sluice proxy"; docs/proxy.md is the operator's guide.
//
// # A request's way
//
//  1. The proxy's own endpoints are answered first: HealthPath,
//     ReadyPath and MetricsPath (Prometheus).
//  2. The method must be one Discord serves (405 otherwise), and the
//     path is put in its one canonical form (routes.CanonicalPath): dot
//     segments, encoded slashes and control characters are refused (400),
//     so no spelling names one route to the proxy and another to the
//     server, or leaves the upstream's base. The route is parsed from that
//     path, which is also what the limiter parses again and the upstream
//     receives (target). The metrics' route label is routes.Route.Label:
//     a known template or "other".
//  3. The token is chosen: a route that carries its own token in the path
//     (webhook executions, interaction follow-ups) is sent without
//     Authorization, on the token-less limiter and so on the per-IP global
//     limit, unless Config.WebhookAuth; else the request's Authorization,
//     or Config.DefaultToken, or none.
//  4. A hopeless answer cached for this token, method, path and query
//     (404 for 30 s, 401 for 5 s by default) is replayed with CacheHeader.
//  5. The body is read into memory (readBody): at most Config.MaxBody
//     bytes, within Config.BodyTimeout, its bytes held in a budget of
//     Config.MaxBuffered across every request. Only then is a token's
//     place taken, so a stalled upload holds none.
//  6. The token's limiter is taken from the registry (made on first use;
//     at most Config.MaxTokens, the least recently used idle one closed to
//     make room; closed after Config.IdleTimeout idle) and does the rest:
//     queueing per bucket, the global limits, retries after 429s, the
//     invalid-request budget. Its answer is relayed byte for byte with
//     every header but the hop-by-hop ones. The default token's limiter
//     and the token-less one are pinned: never closed, not counted.
//  7. An error becomes the proxy's own answer, marked with ProxyHeader:
//     the one table is (*Proxy).classify, shown in docs/proxy.md.
//
// # Invariants
//
//   - Every request ServeHTTP accepts gets exactly one answer, also when
//     the proxy closes: Close fails queued requests (503, shutting_down),
//     lets those on the wire finish, and returns only when every handler
//     has written its answer.
//   - A token's limiter is closed only with nothing in flight (the
//     registry counts acquires under its lock).
//   - Tokens appear nowhere but in memory and on the upstream request:
//     logs and errors name a token by a short hash ("tok:1a2b3c4d"),
//     metrics not at all, and Redis keys use a hash (redisstore.Namespace).
//     Nothing a client wrote reaches a label or a log as written: labels
//     are bounded sets (routes.Route.Label, routes.MethodLabel, at most
//     256 routes), logs show routes.Route.Redacted.
//   - A token route in any spelling is sent without the bot token
//     (unless Config.WebhookAuth) and counted on the per-IP limits.
//   - Request bodies held at once never exceed Config.MaxBuffered bytes.
//   - An HTTP/1 answer given before the request's body was read in full
//     closes the connection (net/http would otherwise wait, with no
//     deadline, for the rest of a body the client may never send), and so
//     does the answer to any chunked request (request smuggling, RFC 9112
//     §6.1).
//
// # Several replicas
//
// With Config.Redis every limiter shares its limits through Redis
// (package redisstore): each token's buckets, global window, pioneers and
// invalid-request budget, and the per-IP ones of token-less requests. Any
// replica can then serve any request, without placement: a new replica
// needs no rebalancing, and one that leaves moves nothing.
package proxy
