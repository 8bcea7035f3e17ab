;; A minimal tool guest without cabi_post_* exports: describe returns an
;; empty list. Build: wat2wasm tool_nopost.wat -o tool_nopost.wasm
(module
  (memory (export "memory") 1)
  (data (i32.const 0x10) "\04\00\00\00\00\00\00\00")
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 0x1000))
  (func (export "capsule:guest/tool@1.0.0#describe") (result i32) (i32.const 0x10))
  (func (export "capsule:guest/tool@1.0.0#call") (param i32 i32 i32 i32) (result i32)
    (i32.store8 (i32.const 0x20) (i32.const 0))
    (i32.store (i32.const 0x24) (local.get 2))
    (i32.store (i32.const 0x28) (local.get 3))
    (i32.const 0x20))
)
