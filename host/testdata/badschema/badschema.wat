;; A capsule:guest@1.0.0 guest whose one tool declares an input schema that
;; does not compile ("minimum" must be a number): the host refuses it at load.
;; Rebuild: wat2wasm badschema.wat -o badschema.wasm
(module
  (memory (export "memory") 1)
  (data (i32.const 256) "bad")
  (data (i32.const 272) "{\"type\":\"object\",\"properties\":{\"port\":{\"minimum\":\"ten\"}}}")

  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 4096))

  (func (export "capsule:guest/tool@1.0.0#describe") (result i32)
    (i32.store (i32.const 1024) (i32.const 256))
    (i32.store (i32.const 1028) (i32.const 3))
    (i32.store (i32.const 1032) (i32.const 256))
    (i32.store (i32.const 1036) (i32.const 3))
    (i32.store (i32.const 1040) (i32.const 272))
    (i32.store (i32.const 1044) (i32.const 57))
    (i32.store (i32.const 1008) (i32.const 1024))
    (i32.store (i32.const 1012) (i32.const 1))
    (i32.const 1008))

  (func (export "capsule:guest/tool@1.0.0#call") (param i32 i32 i32 i32) (result i32) unreachable)
)
