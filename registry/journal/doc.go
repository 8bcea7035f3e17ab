// Package journal is the daemon's durable memory: what `capsule-host
// serve` must know after a crash, restart or upgrade to take back the
// persistent processes it did not start in this run (the keeper owns
// them meanwhile) and to go on as if it had not stopped — who owns each
// process, how to reach it through its backend, its limits and deadlines,
// how it ended, and where each scope's event numbering stands.
//
// It imports nothing of package registry (the registry imports it): its
// records are plain fields, and its enumerations are strings on disk, not
// the registry's Go constants.
//
// # On disk
//
// One bbolt file, <state>/journal.db, mode 0600 (see registry/statedir for
// the rest of the state directory). Its top-level buckets:
//
//	meta    "meta" → the meta record: format version (the bucket
//	        layout, 1), created, opened by the current/last run, and the
//	        time of the last clean shutdown (0 while a run has the file
//	        open, so a crash is visible to the next start)
//	procs   32-byte key → a process record. The key is the registry's
//	        keyed blake2b-256 hash of the process ID; the ID itself never
//	        reaches the journal, so it is in no file and no log line.
//	scopes  capsule NUL principal NUL ('p'|'f' for owner-fallback) →
//	        the scope's next event seq
//
// Every value is crc32c(key || body) followed by body, a JSON object with
// a schema version "v" (process, scope and meta records: version 1). See
// codec.go for why JSON, why strict (only the canonical encoding of a
// valid record decodes) and why a checksum.
//
// # Durability
//
// Every write is one bbolt read-write transaction, which bbolt commits
// with fdatasync: when a method returns nil, the change is on disk. The
// registry journals a spawn (PutProcess) before the ID goes to the guest.
//
// # Damage
//
// Open checks an existing file in a child process (check.go) before the
// daemon maps it: a file bbolt cannot open, or whose pages are
// inconsistent, is refused with a *CorruptError that says the fix —
// never a silent start on an empty journal. With Options.Salvage the file
// is kept as journal.db.corrupt-<UTC time> and replaced by a fresh journal
// holding every record that could be read; Report.Dropped lists the rest.
// A record that does not decode in an otherwise sound file is reported and
// skipped (left in place), or fatal with Options.Strict.
package journal
