;; Fixture for the engine conformance suite (host/engine/enginetest), run
;; against every engine: host imports, ctx propagation, WASI, traps, host
;; panics, spin loops (one in a cabi_realloc a host function calls),
;; memory growth under a limit, _initialize, and a bump-allocating
;; cabi_realloc.
;; Rebuild: wat2wasm suite.wat -o suite.wasm
(module
  (import "test:h/h@1.0.0" "add" (func $add (param i32 i32) (result i32)))
  (import "test:h/h@1.0.0" "trap" (func $htrap))
  (import "test:h/h@1.0.0" "give" (func $give (param i32)))
  (import "test:h/h@1.0.0" "give_spin" (func $give_spin))
  (import "test:h/h@1.0.0" "ctxval" (func $ctxval (result i32)))
  (import "test:h/h@1.0.0" "panic_rt" (func $panic_rt))
  (import "test:h/h@1.0.0" "panic_str" (func $panic_str))
  (import "test:h/h@1.0.0" "wide" (func $wide (param i64 f32 f64) (result i64)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func $prestat (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $env_sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (global $inited (mut i32) (i32.const 0))
  (data (i32.const 16) "hello\n")

  (func (export "_initialize") (global.set $inited (i32.const 42)))
  (func (export "inited") (result i32) (global.get $inited))

  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    ;; a size of 0xfffffff0 spins: a hostile realloc a host function calls
    (if (i32.eq (local.get 3) (i32.const 0xfffffff0)) (then (loop $l (br $l))))
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get 2))))
    (global.set $heap (i32.add (local.get $p) (local.get 3)))
    (local.get $p))

  (func (export "add") (param i32 i32) (result i32) (call $add (local.get 0) (local.get 1)))
  (func (export "wide") (param i64 f32 f64) (result i64) (call $wide (local.get 0) (local.get 1) (local.get 2)))
  (func (export "host_trap") (call $htrap))
  (func (export "panic_rt") (call $panic_rt))
  (func (export "panic_str") (call $panic_str))
  (func (export "ctxval") (result i32) (call $ctxval))
  ;; give: the host reallocs 5 bytes, writes "given" there and stores the
  ;; pointer at 64.
  (func (export "give") (result i32) (call $give (i32.const 64)) (i32.load (i32.const 64)))
  ;; give_spin: the host's realloc inside this call spins in the guest
  (func (export "give_spin") (call $give_spin))
  (func (export "unreachable") unreachable)
  (func (export "oob") (result i32) (i32.load (i32.const -1)))
  (func (export "divzero") (result i32) (i32.div_u (i32.const 1) (i32.const 0)))
  (func (export "overflow") (result i32) (i32.div_s (i32.const 0x80000000) (i32.const -1)))
  (func (export "badconv") (result i32) (i32.trunc_f32_s (f32.const nan)))
  (func (export "spin") (loop $l (br $l)))
  ;; spin_host: a loop that keeps crossing into the host.
  (func (export "spin_host") (loop $l (drop (call $add (i32.const 1) (i32.const 2))) (br $l)))
  ;; loop_add: n guest→host calls of add, for the import-cost benchmark.
  (func (export "loop_add") (param $n i32)
    (block $done (loop $l
      (br_if $done (i32.eqz (local.get $n)))
      (drop (call $add (local.get $n) (i32.const 1)))
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br $l))))
  (func $recurse (export "recurse") (call $recurse))
  (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0)))
  (func (export "exit7") (call $exit (i32.const 7)))
  ;; hello: fd_write "hello\n" to fd 1 (stdout) and fd 2 (stderr).
  (func (export "hello") (result i32)
    (i32.store (i32.const 32) (i32.const 16))
    (i32.store (i32.const 36) (i32.const 6))
    (drop (call $fd_write (i32.const 1) (i32.const 32) (i32.const 1) (i32.const 40)))
    (call $fd_write (i32.const 2) (i32.const 32) (i32.const 1) (i32.const 40)))
  ;; nwritten: the count fd_write stored for the last call.
  (func (export "nwritten") (result i32) (i32.load (i32.const 40)))
  ;; badfd: fd_write to fd 5 (nothing is open there): EBADF (8).
  (func (export "badfd") (result i32)
    (call $fd_write (i32.const 5) (i32.const 32) (i32.const 1) (i32.const 40)))
  ;; badiov: an iovec pointing past memory: EFAULT (21).
  (func (export "badiov") (result i32)
    (i32.store (i32.const 32) (i32.const 0xfffff0))
    (i32.store (i32.const 36) (i32.const 6))
    (call $fd_write (i32.const 1) (i32.const 32) (i32.const 1) (i32.const 40)))
  ;; prestat: fd 3 would be the first preopen; with none it is EBADF (8).
  (func (export "prestat") (result i32) (call $prestat (i32.const 3) (i32.const 48)))
  (func (export "random") (result i32) (call $random (i32.const 256) (i32.const 16)))
  ;; clock: realtime clock into 128; returns errno.
  (func (export "clock") (result i32) (call $clock (i32.const 0) (i64.const 1) (i32.const 128)))
  (func (export "clock_value") (result i64) (i64.load (i32.const 128)))
  ;; nargs: argc + environ count, both must be 0.
  (func (export "nargs") (result i32)
    (drop (call $args_sizes (i32.const 48) (i32.const 52)))
    (drop (call $env_sizes (i32.const 56) (i32.const 60)))
    (i32.add (i32.load (i32.const 48)) (i32.load (i32.const 56))))
)
