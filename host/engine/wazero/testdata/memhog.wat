;; Memory fixtures for the wazero engine's linear-memory tests.
;;   fill(pages) -> pages: grows the memory to pages and writes every byte
;;                  (RSS, not just address space).
;;   hog()       : grows one page at a time, touching each, until a grow is
;;                  refused, then spins: only the deadline ends it.
;; Rebuild: wat2wasm memhog.wat -o memhog.wasm
(module
  (memory (export "memory") 1)
  (func (export "fill") (param $pages i32) (result i32)
    (drop (memory.grow (i32.sub (local.get $pages) (memory.size))))
    (memory.fill (i32.const 0) (i32.const 0xab) (i32.mul (memory.size) (i32.const 65536)))
    (memory.size))
  (func (export "hog")
    (loop $grow
      (if (i32.ne (memory.grow (i32.const 1)) (i32.const -1))
        (then
          (i32.store8 (i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 1)) (i32.const 1))
          (br $grow))))
    (loop $spin (br $spin))))
