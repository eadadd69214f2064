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
//  2. The path is mapped to the upstream's (upstreamPath): /api/vN keeps
//     its version, /api and unversioned paths get the upstream's. The route
//     is parsed once (routes.Parse) for the limiter, the cache key and the
//     metrics' route label (the template, without ids or tokens).
//  3. The token is chosen: a route that carries its own token in the path
//     (webhook executions, interaction follow-ups) is sent without
//     Authorization, on the token-less limiter and so on the per-IP global
//     limit, unless Config.WebhookAuth; else the request's Authorization,
//     or Config.DefaultToken, or none.
//  4. A hopeless answer cached for this token, method, path and query
//     (404 for 30 s, 401 for 5 s by default) is replayed with CacheHeader.
//  5. The token's limiter is taken from the registry (made on first use;
//     at most Config.MaxTokens, the least recently used idle one closed to
//     make room; closed after Config.IdleTimeout idle) and does the rest:
//     queueing per bucket, the global limits, retries after 429s, the
//     invalid-request budget. Its answer is relayed byte for byte with
//     every header but the hop-by-hop ones.
//  6. An error becomes the proxy's own answer, marked with ProxyHeader:
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
//
// # Several replicas
//
// With Config.Redis every limiter shares its limits through Redis
// (package redisstore): each token's buckets, global window, pioneers and
// invalid-request budget, and the per-IP ones of token-less requests. Any
// replica can then serve any request, without placement: a new replica
// needs no rebalancing, and one that leaves moves nothing.
package proxy
