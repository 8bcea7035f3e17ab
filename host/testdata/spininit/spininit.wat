;; A capsule:guest@1.0.0 guest whose _initialize never returns: loading it
;; must fail within the host's call timeout instead of hanging the host.
;; Rebuild: wat2wasm spininit.wat -o spininit.wasm
(module
  (memory (export "memory") 1)
  (func (export "_initialize") (loop $l (br $l)))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 8))
  (func (export "capsule:guest/tool@1.0.0#describe") (result i32) (i32.const 0))
  (func (export "capsule:guest/tool@1.0.0#call") (param i32 i32 i32 i32) (result i32) (i32.const 0))
)
