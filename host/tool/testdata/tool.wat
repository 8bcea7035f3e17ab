;; A capsule:guest/tool@1.0.0 guest written by hand in WAT, with a `mode`
;; switch that makes describe/call/cabi_realloc misbehave in one way each,
;; so the host's result checks can be tested through a real engine.
;; Build: wat2wasm tool.wat -o tool.wasm
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 8192))
  (global $mode (mut i32) (i32.const 0))
  (global $posts (mut i32) (i32.const 0))

  (func (export "set_mode") (param i32) (global.set $mode (local.get 0)))
  (func (export "posts") (result i32) (global.get $posts))

  ;; Bump allocator; mode 5 returns a pointer past the end of memory.
  (func (export "cabi_realloc") (param $old i32) (param $oldsz i32) (param $align i32) (param $size i32) (result i32)
    (local $p i32)
    (if (i32.eq (global.get $mode) (i32.const 5)) (then (return (i32.const 0xfffffff0))))
    (local.set $p
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $p) (local.get $size)))
    ;; Start over inside the page when it is used up (a test guest: the
    ;; host copies every result out before the next call).
    (if (i32.gt_u (global.get $heap) (i32.const 0xf000))
      (then
        (global.set $heap (i32.const 8192))
        (return (call $realloc_again (local.get $align) (local.get $size)))))
    (local.get $p))

  (func $realloc_again (param $align i32) (param $size i32) (result i32)
    (local $p i32)
    (local.set $p
      (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $p) (local.get $size)))
    (local.get $p))

  (data (i32.const 0x100) "echo")
  (data (i32.const 0x110) "Echoes its input")
  (data (i32.const 0x130) "{\"type\":\"object\"}")
  (data (i32.const 0x150) "\ff\fe")
  (data (i32.const 0x160) "unknown tool")
  ;; list<tool-spec> of one element at 0x200: name, description, input-schema.
  (data (i32.const 0x200) "\00\01\00\00\04\00\00\00\10\01\00\00\10\00\00\00\30\01\00\00\11\00\00\00")
  ;; The same with an invalid UTF-8 name, at 0x240.
  (data (i32.const 0x240) "\50\01\00\00\02\00\00\00\10\01\00\00\10\00\00\00\30\01\00\00\11\00\00\00")
  ;; Return areas of describe: (ptr, len).
  (data (i32.const 0x300) "\00\02\00\00\01\00\00\00")
  (data (i32.const 0x310) "\40\02\00\00\01\00\00\00")
  (data (i32.const 0x320) "\00\02\00\00\00\00\00\10")
  (data (i32.const 0x330) "\02\02\00\00\01\00\00\00")

  ;; describe: mode 1 misaligned return pointer, 2 out of bounds, 3 invalid
  ;; UTF-8 in a name, 4 a list longer than 2^28-1 bytes, 8 a misaligned
  ;; list pointer; otherwise one tool.
  (func (export "capsule:guest/tool@1.0.0#describe") (result i32)
    (block $default
      (block $m8 (block $m4 (block $m3 (block $m2 (block $m1
        (br_table $default $m1 $m2 $m3 $m4 $default $default $default $m8 $default (global.get $mode)))
        (return (i32.const 0x302)))
        (return (i32.const 0xfffffff8)))
        (return (i32.const 0x310)))
        (return (i32.const 0x320)))
        (return (i32.const 0x330)))
    (i32.const 0x300))

  (func (export "cabi_post_capsule:guest/tool@1.0.0#describe") (param i32)
    (global.set $posts (i32.add (global.get $posts) (i32.const 1))))

  ;; call: "echo" returns ok(input); any other name err("unknown tool").
  ;; mode 6 traps, mode 7 returns discriminant 2, mode 9 returns ok with a
  ;; string running past the end of memory.
  (func (export "capsule:guest/tool@1.0.0#call") (param $np i32) (param $nl i32) (param $ip i32) (param $il i32) (result i32)
    (if (i32.eq (global.get $mode) (i32.const 6)) (then unreachable))
    (if (i32.eq (global.get $mode) (i32.const 7))
      (then (i32.store8 (i32.const 0x400) (i32.const 2)) (return (i32.const 0x400))))
    (if (i32.eq (global.get $mode) (i32.const 9))
      (then
        (i32.store8 (i32.const 0x400) (i32.const 0))
        (i32.store (i32.const 0x404) (i32.const 0xff00))
        (i32.store (i32.const 0x408) (i32.const 0x1000))
        (return (i32.const 0x400))))
    (if (i32.and
          (i32.eq (local.get $nl) (i32.const 4))
          (i32.eq (i32.load (local.get $np)) (i32.load (i32.const 0x100))))
      (then
        (i32.store8 (i32.const 0x400) (i32.const 0))
        (i32.store (i32.const 0x404) (local.get $ip))
        (i32.store (i32.const 0x408) (local.get $il))
        (return (i32.const 0x400))))
    (i32.store8 (i32.const 0x400) (i32.const 1))
    (i32.store (i32.const 0x404) (i32.const 0x160))
    (i32.store (i32.const 0x408) (i32.const 12))
    (i32.const 0x400))

  (func (export "cabi_post_capsule:guest/tool@1.0.0#call") (param i32)
    (global.set $posts (i32.add (global.get $posts) (i32.const 1))))
)
