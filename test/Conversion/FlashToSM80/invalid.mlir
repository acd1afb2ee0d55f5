// RUN: flashc-opt %s -split-input-file -flash-to-sm80 -verify-diagnostics

// Kernels the mma.sync backend does not take say why.

// expected-error @+1 {{f32 inputs are interpreter-only on the GPU path}}
flash.kernel @f32in attributes {config = #flash.tile<br = 64, bc = 64, head_dim = 64>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = f32, static_sizes = array<i64: -1, -1, -1, -1, -1, 64>} {
^bb0(%b: index, %h: index, %qt: index):
  %0 = flash.load_q %b, %h, %qt : tensor<64x64xf32>
}

// -----

// expected-error @+1 {{head dim 80 is not supported by the mma.sync kernel (supported: 64, 96, 128, 256)}}
flash.kernel @d80 attributes {config = #flash.tile<br = 64, bc = 64, head_dim = 80>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 80>} {
^bb0(%b: index, %h: index, %qt: index):
  %0 = flash.load_q %b, %h, %qt : tensor<64x80xbf16>
}

// -----

// expected-error @+1 {{Br = 40 must be a multiple of 16}}
flash.kernel @br40 attributes {config = #flash.tile<br = 40, bc = 64, head_dim = 64>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 64>} {
^bb0(%b: index, %h: index, %qt: index):
  %0 = flash.load_q %b, %h, %qt : tensor<40x64xbf16>
}

// -----

// expected-error @+1 {{Bc = 24 must be a multiple of 16}}
flash.kernel @bc24 attributes {config = #flash.tile<br = 64, bc = 24, head_dim = 64>, dim_classes = array<i64: 0, 1, 1, 3, 3, 5>, element_type = bf16, static_sizes = array<i64: -1, -1, -1, -1, -1, 64>} {
^bb0(%b: index, %h: index, %qt: index):
  %0 = flash.load_q %b, %h, %qt : tensor<64x64xbf16>
}
