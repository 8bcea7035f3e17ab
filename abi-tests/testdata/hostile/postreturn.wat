;; postreturn.wat: a guest whose call export has a post-return function
;; (cabi_post_capsule:guest/tool@1.0.0#call) that counts its invocations.
;; Tool "posts" answers ok("0") before any post-return ran on this
;; instance and ok("1") after. With a pool of one instance, the second call
;; tells whether the host ran the post-return of the first:
;; TestPostReturnIsCalledWhenExported.
;;
;; Build: wat2wasm postreturn.wat -o postreturn.wasm (wabt, Debian 1.0.32).
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  (global $posts (mut i32) (i32.const 0))
  ;; describe return area at 16: (list ptr 512, len 1)
  (data (i32.const 16) "\00\02\00\00\01\00\00\00")
  (data (i32.const 64) "0")
  (data (i32.const 65) "1")
  ;; tool-spec at 512: name "posts" @128, description @160, schema @224
  (data (i32.const 512) "\80\00\00\00\05\00\00\00\a0\00\00\00\2c\00\00\00\e0\00\00\00\11\00\00\00")
  (data (i32.const 128) "posts")
  (data (i32.const 160) "1 once a post-return ran on this instance")
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

  ;; call return area at 32: ok("0") or ok("1").
  (func (export "capsule:guest/tool@1.0.0#call") (param i32 i32 i32 i32) (result i32)
    (global.set $heap (i32.const 1024))
    (i32.store8 (i32.const 32) (i32.const 0))
    (i32.store (i32.const 36)
      (select (i32.const 65) (i32.const 64) (global.get $posts)))
    (i32.store (i32.const 40) (i32.const 1))
    (i32.const 32))

  ;; The post-return gets the call's return pointer.
  (func (export "cabi_post_capsule:guest/tool@1.0.0#call") (param $ret i32)
    (if (i32.ne (local.get $ret) (i32.const 32)) (then unreachable))
    (global.set $posts (i32.add (global.get $posts) (i32.const 1))))
)
