;; A capsule:guest@1.0.0 guest whose _initialize spins for 2 s of the
;; monotonic clock (busy, so only an interruption ends it early): an
;; instance being made for a call can be interrupted by that call's
;; deadline while its pool closes.
;; Tools: noop -> ok "{}"; trap -> unreachable (discards the instance).
;; Rebuild: wat2wasm slowinit.wat -o slowinit.wasm
(module
  (import "wasi_snapshot_preview1" "clock_time_get" (func $now (param i32 i64 i32) (result i32)))
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 8192))
  (data (i32.const 256) "noop")
  (data (i32.const 272) "does nothing")
  (data (i32.const 288) "{\"type\":\"object\"}")
  (data (i32.const 320) "trap")
  (data (i32.const 336) "hits unreachable")
  (data (i32.const 576) "{}")
  (func $mono (result i64)
    (drop (call $now (i32.const 1) (i64.const 0) (i32.const 2048)))
    (i64.load (i32.const 2048)))
  (func (export "_initialize")
    (local $end i64)
    (local.set $end (i64.add (call $mono) (i64.const 2000000000)))
    (loop $l (br_if $l (i64.lt_u (call $mono) (local.get $end)))))
  ;; cabi_realloc: a bump allocator (8-aligned; calls are small).
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.and (i32.add (i32.add (local.get $p) (local.get 3)) (i32.const 7)) (i32.const -8)))
    (local.get $p))
  ;; describe: list<tool-spec> of 2 at 1024 (24 bytes each), the list at 1008.
  (func (export "capsule:guest/tool@1.0.0#describe") (result i32)
    (i32.store (i32.const 1024) (i32.const 256))
    (i32.store (i32.const 1028) (i32.const 4))
    (i32.store (i32.const 1032) (i32.const 272))
    (i32.store (i32.const 1036) (i32.const 12))
    (i32.store (i32.const 1040) (i32.const 288))
    (i32.store (i32.const 1044) (i32.const 17))
    (i32.store (i32.const 1048) (i32.const 320))
    (i32.store (i32.const 1052) (i32.const 4))
    (i32.store (i32.const 1056) (i32.const 336))
    (i32.store (i32.const 1060) (i32.const 16))
    (i32.store (i32.const 1064) (i32.const 288))
    (i32.store (i32.const 1068) (i32.const 17))
    (i32.store (i32.const 1008) (i32.const 1024))
    (i32.store (i32.const 1012) (i32.const 2))
    (i32.const 1008))
  ;; call(name, input): ok "{}", or unreachable for a name starting with t.
  (func (export "capsule:guest/tool@1.0.0#call") (param $np i32) (param $nl i32) (param i32 i32) (result i32)
    (if (i32.eq (i32.load8_u (local.get $np)) (i32.const 116)) (then unreachable))
    (i32.store8 (i32.const 1100) (i32.const 0))
    (i32.store (i32.const 1104) (i32.const 576))
    (i32.store (i32.const 1108) (i32.const 2))
    (i32.const 1100))
)
