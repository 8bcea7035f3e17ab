;; layout10.wat: capsule:process@1.0.0's layouts are not 1.1.0's.
;;
;; 1.0.0's error-code has no u64 case, so it is 4-aligned: the return area
;; of result<process-result, error-code> needs 4-byte alignment only, and an
;; error's payload sits at offset 4. A host that served 1.0.0 with 1.1.0's
;; layout would trap on the 4-aligned (not 8-aligned) return pointer below,
;; or write the error where this guest does not look.
;;
;; Tool "denied" calls spawn with a command the manifest does not allow and
;; a return pointer of 4100; it answers ok("{}") when the result is
;; err(capability-denied(message)) laid out for 1.0.0, and err(...) naming
;; what it found otherwise. TestLayout10.
;;
;; Build: wat2wasm layout10.wat -o layout10.wasm (wabt, Debian 1.0.32).
(module
  (import "capsule:process/host@1.0.0" "spawn"
    (func $spawn (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i64 i32)))
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 8192))
  (data (i32.const 16) "\00\02\00\00\01\00\00\00")
  ;; ok("{}") at 32, err("bad layout") at 48
  (data (i32.const 32) "\00\00\00\00\40\00\00\00\02\00\00\00")
  (data (i32.const 48) "\01\00\00\00\50\00\00\00\0a\00\00\00")
  (data (i32.const 64) "{}")
  (data (i32.const 80) "bad layout")
  (data (i32.const 96) "/nonexistent/abi-denied")
  ;; tool-spec at 512: "denied" @128, description @160, schema @224
  (data (i32.const 512) "\80\00\00\00\06\00\00\00\a0\00\00\00\3a\00\00\00\e0\00\00\00\11\00\00\00")
  (data (i32.const 128) "denied")
  (data (i32.const 160) "spawn refused, result read with the 1.0.0 error-code layout")
  (data (i32.const 224) "{\"type\":\"object\"}")

  (func (export "cabi_realloc") (param $old i32) (param $oldsz i32) (param $align i32) (param $new i32) (result i32)
    (local $p i32)
    (local.set $p
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $p) (local.get $new)))
    (if (i32.gt_u (global.get $heap) (i32.const 65536)) (then unreachable))
    (local.get $p))

  (func (export "capsule:guest/tool@1.0.0#describe") (result i32)
    (i32.const 16))

  (func (export "capsule:guest/tool@1.0.0#call") (param i32 i32 i32 i32) (result i32)
    (global.set $heap (i32.const 8192))
    ;; Poison the area so stale bytes cannot pass.
    (i64.store (i32.const 4100) (i64.const -1))
    (i64.store (i32.const 4108) (i64.const -1))
    (call $spawn (i32.const 96) (i32.const 23) (i32.const 4) (i32.const 0)
      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 4) (i32.const 0)
      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i64.const 0) (i32.const 4100))
    ;; result disc 1 (err) @4100; error-code disc 0 (capability-denied)
    ;; @4104; its message (ptr, len) @4108, len > 0 and in bounds.
    (if (i32.ne (i32.load8_u (i32.const 4100)) (i32.const 1)) (then (return (i32.const 48))))
    (if (i32.ne (i32.load8_u (i32.const 4104)) (i32.const 0)) (then (return (i32.const 48))))
    (if (i32.eqz (i32.load (i32.const 4112))) (then (return (i32.const 48))))
    (if (i32.gt_u (i32.add (i32.load (i32.const 4108)) (i32.load (i32.const 4112))) (i32.const 65536))
      (then (return (i32.const 48))))
    (i32.const 32))
)
