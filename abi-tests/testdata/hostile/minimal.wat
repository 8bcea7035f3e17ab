;; minimal.wat: the smallest capsule:guest@1.0.0 guest, without the optional
;; post-return functions (cabi_post_*), as wit-bindgen-go v0.7.0 emits its
;; exports. The Canonical ABI makes post-return optional, so the host must
;; run this guest: TestPostReturnIsOptional.
;;
;; Build: wat2wasm minimal.wat -o minimal.wasm (wabt, Debian 1.0.32).
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  ;; describe return area at 16: (list ptr 512, len 1)
  (data (i32.const 16) "\00\02\00\00\01\00\00\00")
  ;; call return area at 32: ok("{}")
  (data (i32.const 32) "\00\00\00\00\40\00\00\00\02\00\00\00")
  (data (i32.const 64) "{}")
  ;; tool-spec at 512: name "noop" @128, description "does nothing" @160,
  ;; input-schema "{\"type\":\"object\"}" @192
  (data (i32.const 512) "\80\00\00\00\04\00\00\00\a0\00\00\00\0c\00\00\00\c0\00\00\00\11\00\00\00")
  (data (i32.const 128) "noop")
  (data (i32.const 160) "does nothing")
  (data (i32.const 192) "{\"type\":\"object\"}")

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
    (global.set $heap (i32.const 1024))
    (i32.const 32))
)
