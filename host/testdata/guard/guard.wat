;; A capsule:guest@1.0.0 guest in WAT for the host's guard tests: what the
;; host must enforce whatever the guest does. Tools (dispatched on the
;; first byte of the name):
;;   noop -> ok "{}"
;;   port -> ok "{}"; declares {"port": integer >= 1024} and checks nothing
;;           itself: the host validates the input against the schema
;;   grow -> grows memory until it holds at least 320 MiB, then ok "{}":
;;           it asks for 512 MiB, and each time a grow is refused (-1: the
;;           host's limit) it asks for half as much, until even one page
;;           is refused: then it hits unreachable (an allocator that takes
;;           all there is, then faults). It never touches the memory.
;; Rebuild: wat2wasm guard.wat -o guard.wasm (tests write the manifest and its sha256)
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 8192))

  (data (i32.const 256) "noop")
  (data (i32.const 272) "does nothing")
  (data (i32.const 288) "{\"type\":\"object\"}")
  (data (i32.const 320) "port")
  (data (i32.const 336) "needs port >= 1024")
  (data (i32.const 368) "{\"type\":\"object\",\"required\":[\"port\"],\"properties\":{\"port\":{\"type\":\"integer\",\"minimum\":1024}}}")
  (data (i32.const 480) "grow")
  (data (i32.const 496) "grows memory until refused")
  (data (i32.const 576) "{}")

  ;; cabi_realloc: bump allocator, grows memory as needed.
  (func (export "cabi_realloc") (param $old i32) (param $osz i32) (param $align i32) (param $n i32) (result i32)
    (local $p i32) (local $end i32)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get $align))))
    (local.set $end (i32.add (local.get $p) (local.get $n)))
    (if (i32.gt_u (local.get $end) (i32.mul (memory.size) (i32.const 65536)))
      (then (if (i32.eq (memory.grow (i32.add (i32.shr_u (i32.sub (local.get $end) (i32.mul (memory.size) (i32.const 65536))) (i32.const 16)) (i32.const 1))) (i32.const -1))
        (then unreachable))))
    (global.set $heap (local.get $end))
    (local.get $p))

  ;; spec writes tool-spec i (24 bytes) at 1024 + 24*i.
  (func $spec (param $i i32) (param $np i32) (param $nl i32) (param $dp i32) (param $dl i32) (param $sp i32) (param $sl i32)
    (local $a i32)
    (local.set $a (i32.add (i32.const 1024) (i32.mul (local.get $i) (i32.const 24))))
    (i32.store (local.get $a) (local.get $np))
    (i32.store offset=4 (local.get $a) (local.get $nl))
    (i32.store offset=8 (local.get $a) (local.get $dp))
    (i32.store offset=12 (local.get $a) (local.get $dl))
    (i32.store offset=16 (local.get $a) (local.get $sp))
    (i32.store offset=20 (local.get $a) (local.get $sl)))

  (func (export "capsule:guest/tool@1.0.0#describe") (result i32)
    (call $spec (i32.const 0) (i32.const 256) (i32.const 4) (i32.const 272) (i32.const 12) (i32.const 288) (i32.const 17))
    (call $spec (i32.const 1) (i32.const 320) (i32.const 4) (i32.const 336) (i32.const 18) (i32.const 368) (i32.const 93))
    (call $spec (i32.const 2) (i32.const 480) (i32.const 4) (i32.const 496) (i32.const 26) (i32.const 288) (i32.const 17))
    (i32.store (i32.const 1008) (i32.const 1024))
    (i32.store (i32.const 1012) (i32.const 3))
    (i32.const 1008))

  ;; ret writes result<string,string> {disc, ptr, len} at 992.
  (func $ret (param $disc i32) (param $p i32) (param $l i32) (result i32)
    (i32.store8 (i32.const 992) (local.get $disc))
    (i32.store (i32.const 996) (local.get $p))
    (i32.store (i32.const 1000) (local.get $l))
    (i32.const 992))

  (func (export "capsule:guest/tool@1.0.0#call") (param $np i32) (param $nl i32) (param $ip i32) (param $il i32) (result i32)
    (local $c i32) (local $step i32)
    (local.set $c (i32.load8_u (local.get $np)))
    (if (i32.eq (local.get $c) (i32.const 0x6e)) (then (return (call $ret (i32.const 0) (i32.const 576) (i32.const 2)))))
    (if (i32.eq (local.get $c) (i32.const 0x70)) (then (return (call $ret (i32.const 0) (i32.const 576) (i32.const 2)))))
    (if (i32.eq (local.get $c) (i32.const 0x67)) (then
      (local.set $step (i32.const 8192))
      (block $done
        (loop $more
          (br_if $done (i32.ge_u (memory.size) (i32.const 5120)))
          (if (i32.eq (memory.grow (local.get $step)) (i32.const -1))
            (then
              (if (i32.eq (local.get $step) (i32.const 1)) (then unreachable))
              (local.set $step (i32.shr_u (local.get $step) (i32.const 1)))))
          (br $more)))
      (return (call $ret (i32.const 0) (i32.const 576) (i32.const 2)))))
    unreachable)

  ;; Called by the host after it has copied the result out.
  (func (export "cabi_post_capsule:guest/tool@1.0.0#call") (param i32)
    (global.set $heap (i32.const 8192)))
)
