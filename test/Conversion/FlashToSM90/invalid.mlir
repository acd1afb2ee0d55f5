// RUN: flashc-opt %s -split-input-file -flash-to-sm90 -verify-diagnostics

// A warpgroup owns 64 query rows: Br must be a multiple of 64.
// expected-error @below {{flash-to-sm90: Br = 32 must be 64, 128, 192 or 256 (one warpgroup per 64 query rows)}}
flash.kernel @br32 attributes {config = #flash.tile<br = 32, bc = 64, head_dim = 64>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 64>} {
^bb0(%b: index, %h: index, %qt: index):
  flash.return
}

// -----

// expected-error @below {{flash-to-sm90: Bc = 24 must be a multiple of 16 of at most 256 (the N of wgmma m64nNk16)}}
flash.kernel @bc24 attributes {config = #flash.tile<br = 64, bc = 24, head_dim = 64>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 64>} {
^bb0(%b: index, %h: index, %qt: index):
  flash.return
}

// -----

// expected-error @below {{flash-to-sm90: head dim 80 is not supported by the wgmma kernel (supported: 64, 96, 128, 256)}}
flash.kernel @d80 attributes {config = #flash.tile<br = 64, bc = 64, head_dim = 80>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 80>} {
^bb0(%b: index, %h: index, %qt: index):
  flash.return
}

// -----

// D = 256 with Br = 256 and Bc = 256 needs 394256 bytes of shared memory.
// expected-error @below {{flash-to-sm90: the tiles need 394256 bytes of shared memory, more than a block can have}}
flash.kernel @big attributes {config = #flash.tile<br = 256, bc = 256, head_dim = 256>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 256>} {
^bb0(%b: index, %h: index, %qt: index):
  flash.return
}

// -----

// The TMA barriers' phases run from the kernel's start: one K/V loop only.
// expected-error @below {{flash-to-sm90: kv-copy=tma supports one loop over K/V blocks per kernel, found 2 (use kv-copy=cp.async)}}
flash.kernel @two_loops attributes {config = #flash.tile<br = 64, bc = 64, head_dim = 64>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 64>} {
^bb0(%b: index, %h: index, %qt: index):
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %0 = flash.kv_head %h
  scf.for %i = %c0 to %c4 step %c1 {
    %1 = flash.load_kv key %b, %0, %i : tensor<64x64xbf16>
  }
  scf.for %i = %c0 to %c4 step %c1 {
    %1 = flash.load_kv key %b, %0, %i : tensor<64x64xbf16>
  }
  flash.return
}
