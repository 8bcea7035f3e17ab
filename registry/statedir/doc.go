// Package statedir is the daemon's state directory: the single-instance
// lock, the secret keys that must outlive a restart, and the rules every
// file in it obeys. The registry keeps persistent processes across a crash,
// restart or upgrade of `capsule-host serve`; what it must remember lives
// here, so the rules are strict: private to the daemon's uid, written
// atomically, refused (never repaired silently) when they look tampered
// with.
//
// Layout (names below the state directory are constants of this package
// or of registry/journal):
//
//	<state>/                 0700, owned by the daemon's uid (CheckPrivateDir)
//	  daemon.lock            0600, flock'd by the running daemon (Lock);
//	                         holds "<pid> <start-ticks>\n" of the holder
//	  journal.db             0600, registry/journal (bbolt)
//	  journal.db.corrupt-*   a corrupt journal moved aside by a salvage
//	  keys/                  0700
//	    id-hash.key          0600, 32 bytes: the blake2b key of process IDs
//	    cursor-mac.key       0600, 32 bytes: the blake2b key of cursors
//
// The keys persist so that IDs and read-since cursors issued before a
// restart stay valid after it: a fresh key would orphan every journaled
// process (its ID would hash to nothing) and void every cursor.
package statedir

// File names inside a state directory.
const (
	// LockFile is flock'd by the one daemon that owns the directory.
	LockFile = "daemon.lock"
	// IDHashKeyFile keys the hash that maps a process ID to its journal key.
	IDHashKeyFile = "keys/id-hash.key"
	// CursorMACKeyFile keys the MAC of read-since cursor tokens.
	CursorMACKeyFile = "keys/cursor-mac.key"
	// IDSealKeyFile keys the AEAD that seals each process ID in its
	// journal record, so a restarted daemon can list and name its
	// processes while no file holds an ID in plaintext.
	IDSealKeyFile = "keys/id-seal.key"
)
