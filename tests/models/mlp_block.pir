{
    (%0) = "builtin.parameter" () {is_distributed:[false],is_parameter:[true],need_clip:[true],parameter_name:"linear_1.b_0",persistable:[true],stop_gradient:[false],trainable:[true]} : () -> tensor<64xf32>
    (%1) = "builtin.parameter" () {is_distributed:[false],is_parameter:[true],need_clip:[true],parameter_name:"linear_1.w_0",persistable:[true],stop_gradient:[false],trainable:[true]} : () -> tensor<256x64xf32>
    (%2) = "builtin.parameter" () {is_distributed:[false],is_parameter:[true],need_clip:[true],parameter_name:"linear_0.b_0",persistable:[true],stop_gradient:[false],trainable:[true]} : () -> tensor<256xf32>
    (%3) = "builtin.parameter" () {is_distributed:[false],is_parameter:[true],need_clip:[true],parameter_name:"linear_0.w_0",persistable:[true],stop_gradient:[false],trainable:[true]} : () -> tensor<64x256xf32>
    (%4) = "builtin.parameter" () {is_distributed:[false],is_parameter:[true],need_clip:[true],parameter_name:"layer_norm_0.b_0",persistable:[true],stop_gradient:[false],trainable:[true]} : () -> tensor<64xf32>
    (%5) = "builtin.parameter" () {is_distributed:[false],is_parameter:[true],need_clip:[true],parameter_name:"layer_norm_0.w_0",persistable:[true],stop_gradient:[false],trainable:[true]} : () -> tensor<64xf32>
    (%6) = "pd_op.data" () {dtype:float32,name:"x",place:Place(undefined:0),shape:[8,16,64],stop_gradient:[true]} : () -> tensor<8x16x64xf32>
    (%7, %8, %9) = "pd_op.layer_norm" (%6, %5, %4) {begin_norm_axis:2,epsilon:1e-05,stop_gradient:[false,false,false],struct_name:"/LayerNorm/"} : (tensor<8x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<8x16x64xf32>, tensor<8x16xf32>, tensor<8x16xf32>
    (%10) = "pd_op.matmul" (%7, %3) {stop_gradient:[false],struct_name:"/Linear/",transpose_x:false,transpose_y:false} : (tensor<8x16x64xf32>, tensor<64x256xf32>) -> tensor<8x16x256xf32>
    (%11) = "pd_op.add" (%10, %2) {stop_gradient:[false],struct_name:"/Linear/"} : (tensor<8x16x256xf32>, tensor<256xf32>) -> tensor<8x16x256xf32>
    (%12) = "pd_op.gelu" (%11) {approximate:false,stop_gradient:[false],struct_name:"/GELU/"} : (tensor<8x16x256xf32>) -> tensor<8x16x256xf32>
    (%13) = "pd_op.matmul" (%12, %1) {stop_gradient:[false],struct_name:"/Linear_1/",transpose_x:false,transpose_y:false} : (tensor<8x16x256xf32>, tensor<256x64xf32>) -> tensor<8x16x64xf32>
    (%14) = "pd_op.add" (%13, %0) {stop_gradient:[false],struct_name:"/Linear_1/"} : (tensor<8x16x64xf32>, tensor<64xf32>) -> tensor<8x16x64xf32>
    (%15) = "pd_op.full_int_array" () {dtype:int64,place:Place(cpu),stop_gradient:[true],value:[]} : () -> tensor<0xi64>
    (%16) = "pd_op.mean" (%14, %15) {keepdim:false,stop_gradient:[false]} : (tensor<8x16x64xf32>, tensor<0xi64>) -> tensor<f32>
}
