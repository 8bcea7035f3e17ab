;; A hand-written core-wasm guest of capsule:process/host@1.1.0/@1.0.0 for
;; tests through a real engine: one export per hostile act (each must trap
;; that call with a clear reason), a well-behaved status call, and loops
;; for the import round-trip benchmark.
;; Build: wat2wasm guest.wat -o guest.wasm
(module
  (import "bench" "noop" (func $noop))
  (import "bench" "str" (func $str (param i32 i32)))
  (import "capsule:process/host@1.1.0" "status" (func $status (param i32 i32 i32)))
  (import "capsule:process/host@1.1.0" "release" (func $release (param i32 i32 i32)))
  (import "capsule:process/host@1.1.0" "attach" (func $attach (param i32 i32 i32)))
  (import "capsule:process/host@1.1.0" "[method]process-handle.os-pid" (func $ospid (param i32 i32)))
  (import "capsule:process/host@1.1.0" "read-since" (func $read_since (param i32 i32 i32 i32 i32 i32 i32 i32)))
  (import "capsule:process/host@1.1.0" "[resource-drop]process-handle" (func $drop (param i32)))
  (import "capsule:process/host@1.0.0" "spawn"
    (func $spawn10 (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i64 i32)))

  (memory (export "memory") 4)
  (global $heap (mut i32) (i32.const 0x2000))
  (global $mode (mut i32) (i32.const 0))

  ;; 52 bytes: the length of a process ID.
  (data (i32.const 64) "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
  (data (i32.const 0x200) "ab\ff\fe")

  (func (export "set_mode") (param i32) (global.set $mode (local.get 0)))

  ;; Bump allocator that never frees; mode 1 returns memory out of bounds,
  ;; mode 2 a misaligned pointer.
  (func (export "cabi_realloc") (param $old i32) (param $oldsz i32) (param $align i32) (param $size i32) (result i32)
    (local $p i32)
    (if (i32.eq (global.get $mode) (i32.const 1)) (then (return (i32.const 0xfffffff0))))
    (if (i32.eq (global.get $mode) (i32.const 2)) (then (return (i32.const 0x1001))))
    (local.set $p
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $p) (local.get $size)))
    ;; Wrap around inside the page so benchmark loops never run out.
    (if (i32.gt_u (global.get $heap) (i32.const 0x3f000))
      (then
        (global.set $heap (i32.add (i32.const 0x2000) (local.get $size)))
        (return (i32.const 0x2000))))
    (local.get $p))

  ;; The well-behaved path: status of an unknown 52-byte ID; returns the
  ;; result discriminant (1: error) and the error-code case (10:
  ;; no-such-process) as disc*100+case.
  (func (export "ok_status") (result i32)
    (call $status (i32.const 64) (i32.const 52) (i32.const 1024))
    (i32.add
      (i32.mul (i32.load8_u (i32.const 1024)) (i32.const 100))
      (i32.load8_u (i32.const 1032))))

  (func (export "oob_string") (call $status (i32.const 0xffff0000) (i32.const 52) (i32.const 1024)))
  (func (export "bad_utf8") (call $status (i32.const 0x200) (i32.const 4) (i32.const 1024)))
  (func (export "len_past_memory") (call $status (i32.const 64) (i32.const 0x7fffffff) (i32.const 1024)))
  (func (export "misaligned_retptr") (call $status (i32.const 64) (i32.const 52) (i32.const 1025)))
  (func (export "retptr_oob") (call $status (i32.const 64) (i32.const 52) (i32.const 0xfffffff8)))
  (func (export "forged_handle") (call $ospid (i32.const 77) (i32.const 1024)))
  (func (export "null_handle") (call $ospid (i32.const 0) (i32.const 1024)))
  (func (export "drop_forged") (call $drop (i32.const 5)))

  ;; spawn with an empty cmd: the error carries a message, which the host
  ;; allocates with cabi_realloc (set mode 1 or 2 first).
  (func (export "spawn_empty")
    (call $spawn10
      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)
      (i32.const 0) (i32.const 0) (i32.const 0)
      (i32.const 0) (i32.const 0)
      (i32.const 0) (i32.const 0) (i32.const 0)
      (i32.const 0) (i64.const 0)
      (i32.const 1024)))

  ;; attach(id at $p, len $n), use the handle, drop it, use it again (trap).
  ;; Mode 3: drop it twice instead (trap).
  (func (export "attach_drop_use") (param $p i32) (param $n i32) (result i32)
    (local $h i32)
    (call $attach (local.get $p) (local.get $n) (i32.const 1024))
    (if (i32.load8_u (i32.const 1024)) (then (return (i32.const -1))))
    (local.set $h (i32.load (i32.const 1032)))
    (call $ospid (local.get $h) (i32.const 1024))
    (call $drop (local.get $h))
    (if (i32.eq (global.get $mode) (i32.const 3))
      (then (call $drop (local.get $h)))
      (else (call $ospid (local.get $h) (i32.const 1024))))
    (local.get $h))

  (func (export "loop_noop") (param $n i32)
    (block $done (loop $l
      (br_if $done (i32.eqz (local.get $n)))
      (call $noop)
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br $l))))

  (func (export "loop_str") (param $n i32)
    (block $done (loop $l
      (br_if $done (i32.eqz (local.get $n)))
      (call $str (i32.const 64) (i32.const 52))
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br $l))))

  (func (export "loop_release") (param $n i32)
    (block $done (loop $l
      (br_if $done (i32.eqz (local.get $n)))
      (call $release (i32.const 64) (i32.const 52) (i32.const 1024))
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br $l))))
;; attach(id) + status(id) + drop, $count times (benchmark).
  (func (export "loop_attach_status") (param $p i32) (param $n i32) (param $count i32)
    (block $done (loop $l
      (br_if $done (i32.eqz (local.get $count)))
      (call $attach (local.get $p) (local.get $n) (i32.const 1024))
      (if (i32.load8_u (i32.const 1024)) (then unreachable))
      (call $status (local.get $p) (local.get $n) (i32.const 1536))
      (if (i32.load8_u (i32.const 1536)) (then unreachable))
      (call $drop (i32.load (i32.const 1032)))
      (local.set $count (i32.sub (local.get $count) (i32.const 1)))
      (br $l))))

  ;; read-since(id, stdout, none, 65536) from the start, $count times
  ;; (benchmark; non-draining, so every call copies the same 64 KiB).
  (func (export "loop_read_since") (param $p i32) (param $n i32) (param $count i32)
    (block $done (loop $l
      (br_if $done (i32.eqz (local.get $count)))
      (call $read_since (local.get $p) (local.get $n) (i32.const 0)
        (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 65536) (i32.const 1024))
      (if (i32.load8_u (i32.const 1024)) (then unreachable))
      (if (i32.ne (i32.load (i32.const 1036)) (i32.const 65536)) (then unreachable))
      (local.set $count (i32.sub (local.get $count) (i32.const 1)))
      (br $l))))
)
