// Package actorhost is what hosting Sluice's actors costs protoactor, and
// the choices that keep it small: one actor system for the whole process
// (Acquire, Release), bucket actors' names drawn for protoactor's process
// registry (Namer), and their mailbox (Mailbox).
//
// Its one user is package actors: Start acquires the host and Close
// releases it; the bucket actors' Props take Mailbox; the supervisor, the
// only actor that spawns bucket actors, names each with its Namer.
//
// Invariants:
//   - the host exists exactly while at least one acquisition is not yet
//     released: the first Acquire makes it, the last Release shuts it
//     down, each under the host's lock;
//   - every bucket actor's id hashes into one of the first RegistryUsed of
//     protoactor's RegistrySlices registry slices (TestRegistrySlices
//     checks protoactor's layout and where a Namer's names land), so what
//     the registry keeps after bucket actors have stopped is bounded by
//     the most of them alive at once.
//
// Nothing here is on a request's path: a name is drawn per spawn, the
// host once per System; protoactor looks the registry up only to spawn,
// stop and reach an actor whose cached process is gone.
package actorhost
