;; A capsule:guest@1.0.0 guest whose _initialize starts a background
;; process (/bin/sh -c "exec sleep 3071") and keeps the handle: an instance
;; must enter the pool with no live handles, so the host drops it (reaping
;; the process) once instantiation is over.
;; Rebuild: wat2wasm spawninit.wat -o spawninit.wasm
(module
  (import "capsule:process/host@1.0.0" "spawn-background"
    (func $spawn_background (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i64 i32)))
  (memory (export "memory") 1)
  (data (i32.const 176) "/bin/sh")
  ;; args: list<string> of 2 at 192: "-c" @224, "exec sleep 3071" @240
  (data (i32.const 192) "\e0\00\00\00\02\00\00\00\f0\00\00\00\0f\00\00\00")
  (data (i32.const 224) "-c")
  (data (i32.const 240) "exec sleep 3071")
  (func (export "_initialize")
    (call $spawn_background (i32.const 176) (i32.const 7) (i32.const 192) (i32.const 2)
      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)
      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i64.const 0) (i32.const 4096))
    (if (i32.load8_u (i32.const 4096)) (then unreachable)))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 8192))
  ;; describe: an empty list<tool-spec>.
  (func (export "capsule:guest/tool@1.0.0#describe") (result i32)
    (i32.store (i32.const 1008) (i32.const 1024))
    (i32.store (i32.const 1012) (i32.const 0))
    (i32.const 1008))
  (func (export "capsule:guest/tool@1.0.0#call") (param i32 i32 i32 i32) (result i32) unreachable)
)
