//! Batched matrix products through `matrixmultiply` (sgemm / dgemm, pure Rust, also on
//! wasm32), and the matmul gradient.

use crate::exec::tensor::{reduce_to, Data, Tensor};
use crate::ir::infer::broadcast;
use crate::ir::DType;

use crate::exec::op_error::OpError;

type Res<T> = Result<T, OpError>;

/// Promotes a vector operand to a matrix: X `[k]` is a row `[1, k]`, Y `[k]` a column.
fn as_matrix(shape: &[usize], is_x: bool) -> Vec<usize> {
    match shape.len() {
        1 if is_x => vec![1, shape[0]],
        1 => vec![shape[0], 1],
        _ => shape.to_vec(),
    }
}

/// `op(a) @ op(b)` over broadcast batch dims, where `op` transposes the last two dims when
/// asked. Returns the result with full (broadcast) batch dims and matrix dims `[m, n]`.
pub fn bmm(a: &Tensor, ta: bool, b: &Tensor, tb: bool) -> Res<Tensor> {
    bmm_as(a, &a.shape, ta, b, &b.shape, tb)
}

/// [`bmm`] reading `a` as shape `a_shape` and `b` as `b_shape` (a reshape without copying
/// the operand: the gradients read their operands as matrices).
fn bmm_as(
    a: &Tensor,
    a_shape: &[usize],
    ta: bool,
    b: &Tensor,
    b_shape: &[usize],
    tb: bool,
) -> Res<Tensor> {
    let (sa, sb) = (as_matrix(a_shape, true), as_matrix(b_shape, false));
    let (ra, rb) = (sa.len(), sb.len());
    let (m, ka) = if ta {
        (sa[ra - 1], sa[ra - 2])
    } else {
        (sa[ra - 2], sa[ra - 1])
    };
    let (kb, n) = if tb {
        (sb[rb - 1], sb[rb - 2])
    } else {
        (sb[rb - 2], sb[rb - 1])
    };
    if ka != kb {
        return Err(OpError::Contraction(ka, kb));
    }
    let (ba, bb) = (&sa[..ra - 2], &sb[..rb - 2]);
    let batch = broadcast(ba, bb).ok_or(OpError::MatmulBatch)?;
    let ia = crate::exec::tensor::broadcast_index(ba, &batch);
    let ib = crate::exec::tensor::broadcast_index(bb, &batch);
    let (ma, mb) = (sa[ra - 2] * sa[ra - 1], sb[rb - 2] * sb[rb - 1]);
    // Row/column strides of the (possibly transposed) operands.
    let (rsa, csa) = if ta {
        (1, sa[ra - 1] as isize)
    } else {
        (sa[ra - 1] as isize, 1)
    };
    let (rsb, csb) = if tb {
        (1, sb[rb - 1] as isize)
    } else {
        (sb[rb - 1] as isize, 1)
    };
    // The unsafe gemm calls below rely on every batch block lying inside its buffer.
    let blocks = |idx: &[usize]| idx.iter().copied().max().map_or(0, |x| x + 1);
    if a.numel() < ma * blocks(&ia) || b.numel() < mb * blocks(&ib) {
        return Err(OpError::MatmulOperand);
    }
    let mut shape = batch.clone();
    shape.extend([m, n]);
    let g = Batches {
        m,
        k: ka,
        n,
        blocks: (&ia, &ib),
        sizes: (ma, mb),
        a: (rsa, csa),
        b: (rsb, csb),
    };
    let data = match (&a.data, &b.data) {
        (Data::F32(x), Data::F32(y)) => Data::f32(g.run(x, y)),
        (Data::F64(x), Data::F64(y)) => Data::f64(g.run(x, y)),
        _ => return Err(OpError::MatmulDtype),
    };
    Ok(Tensor { shape, data })
}

/// The GEMMs of one batched product: each batch's block of A (B) starts at its index in
/// `blocks` times its block size, with the given row and column strides.
struct Batches<'a> {
    m: usize,
    k: usize,
    n: usize,
    blocks: (&'a [usize], &'a [usize]),
    sizes: (usize, usize),
    a: (isize, isize),
    b: (isize, isize),
}

/// matrixmultiply's GEMM for one element type.
trait Gemm: Copy {
    /// `c = a @ b` (β = 0).
    ///
    /// # Safety
    /// As `matrixmultiply::sgemm`: the pointers and strides address only elements inside
    /// their buffers.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        c: *mut Self,
    );
}

/// `Gemm` for an element type through matrixmultiply's routine for it.
macro_rules! gemm_via {
    ($t:ty, $routine:path) => {
        impl Gemm for $t {
            unsafe fn gemm(
                m: usize,
                k: usize,
                n: usize,
                a: *const $t,
                rsa: isize,
                csa: isize,
                b: *const $t,
                rsb: isize,
                csb: isize,
                c: *mut $t,
            ) {
                // SAFETY: the caller's contract.
                unsafe {
                    $routine(
                        m, k, n, 1.0, a, rsa, csa, b, rsb, csb, 0.0, c, n as isize, 1,
                    )
                }
            }
        }
    };
}

gemm_via!(f32, matrixmultiply::sgemm);
gemm_via!(f64, matrixmultiply::dgemm);

impl Batches<'_> {
    /// Every batch's product, in batch order. The caller has checked that each block of
    /// `x` and `y` lies inside its buffer.
    fn run<T: Gemm>(&self, x: &[T], y: &[T]) -> Vec<T> {
        let (m, n) = (self.m, self.n);
        let nb = self.blocks.0.len();
        // Left uninitialised: with β = 0 the GEMM writes every element of C without reading
        // it (matrixmultiply's contract, empty products included), and the length is set
        // once every block is written.
        let mut c: Vec<T> = Vec::with_capacity(nb * m * n);
        for i in 0..nb {
            let (xo, yo, co) = (
                self.blocks.0[i] * self.sizes.0,
                self.blocks.1[i] * self.sizes.1,
                i * m * n,
            );
            // SAFETY: the offsets and strides address only elements inside `x`, `y` and
            // `c`: each batch block has ma / mb / m*n elements and the strides are those
            // of a row-major matrix of that block (checked by the caller); `c` has room
            // for nb * m * n.
            unsafe {
                T::gemm(
                    m,
                    self.k,
                    n,
                    x[xo..].as_ptr(),
                    self.a.0,
                    self.a.1,
                    y[yo..].as_ptr(),
                    self.b.0,
                    self.b.1,
                    c.as_mut_ptr().add(co),
                );
            }
        }
        // SAFETY: the nb blocks of m * n elements were all written above.
        unsafe { c.set_len(nb * m * n) };
        c
    }
}

/// matmul_v2 forward, with Paddle's vector rules.
pub fn matmul(x: &Tensor, y: &Tensor, tx: bool, ty: bool) -> Res<Tensor> {
    let tx = tx && x.shape.len() >= 2;
    let ty = ty && y.shape.len() >= 2;
    let mut out = bmm(x, tx, y, ty)?;
    // Drop the promoted unit dims of vector operands.
    let r = out.shape.len();
    if y.shape.len() == 1 {
        out.shape.remove(r - 1);
    }
    if x.shape.len() == 1 {
        let r = out.shape.len();
        out.shape.remove(r - if y.shape.len() == 1 { 1 } else { 2 });
    }
    Ok(out)
}

/// Sums a full-batch gradient down to the operand's own (broadcast) shape.
fn to_operand(g: Tensor, shape: &[usize], dtype: DType, is_x: bool) -> Tensor {
    if g.shape == shape {
        return g;
    }
    let promoted = as_matrix(shape, is_x);
    let vals = g.to_f64();
    let numel: usize = shape.iter().product();
    if vals.len() == numel {
        return Tensor::float(dtype, shape.to_vec(), vals);
    }
    let reduced = reduce_to(&vals, &g.shape, &promoted);
    Tensor::float(dtype, shape.to_vec(), reduced)
}

/// A batch of rows times a weight matrix (x `[..., m, k]`, y `[k, n]` or `[n, k]`
/// transposed): the weight's gradient sums over every row of every batch, so the batch dims
/// fold into the rows and it is one GEMM, not a gradient per batch summed afterwards.
fn batched_by_weight(
    x: &Tensor,
    y: &Tensor,
    dout: &Tensor,
    tx: bool,
    ty: bool,
) -> Res<Option<(Tensor, Tensor)>> {
    if tx || y.shape.len() != 2 || x.shape.len() < 3 || dout.shape.len() != x.shape.len() {
        return Ok(None);
    }
    let k = x.shape[x.shape.len() - 1];
    let rows = x.shape[..x.shape.len() - 1].iter().product::<usize>();
    let n = dout.shape[dout.shape.len() - 1];
    let (x2, d2) = ([rows, k], [rows, n]);
    let dy = if ty {
        bmm_as(dout, &d2, true, x, &x2, false)?
    } else {
        bmm_as(x, &x2, true, dout, &d2, false)?
    };
    let dx = bmm_as(dout, &d2, false, y, &y.shape, !ty)?.reshaped(x.shape.clone());
    Ok(Some((dx, dy)))
}

/// matmul_v2_grad: (dX, dY) for `out = op(x) @ op(y)`.
pub fn matmul_grad(
    x: &Tensor,
    y: &Tensor,
    dout: &Tensor,
    tx: bool,
    ty: bool,
) -> Res<(Tensor, Tensor)> {
    let tx = tx && x.shape.len() >= 2;
    let ty = ty && y.shape.len() >= 2;
    if let Some(grads) = batched_by_weight(x, y, dout, tx, ty)? {
        return Ok(grads);
    }
    // Work with matrix-shaped operands; dout gets back its unit dims.
    let (xm, ym) = (as_matrix(&x.shape, true), as_matrix(&y.shape, false));
    let mut dshape = dout.shape.clone();
    if y.shape.len() == 1 {
        dshape.push(1);
    }
    if x.shape.len() == 1 {
        let r = dshape.len();
        dshape.insert(r - 1, 1);
    }
    let (d, ds) = (dout, &dshape[..]);
    let (dx, dy) = match (tx, ty) {
        (false, false) => (
            bmm_as(d, ds, false, y, &ym, true)?,
            bmm_as(x, &xm, true, d, ds, false)?,
        ),
        (true, false) => (
            bmm_as(y, &ym, false, d, ds, true)?,
            bmm_as(x, &xm, false, d, ds, false)?,
        ),
        (false, true) => (
            bmm_as(d, ds, false, y, &ym, false)?,
            bmm_as(d, ds, true, x, &xm, false)?,
        ),
        (true, true) => (
            bmm_as(y, &ym, true, d, ds, true)?,
            bmm_as(d, ds, true, x, &xm, true)?,
        ),
    };
    Ok((
        to_operand(dx, &x.shape, x.dtype(), true),
        to_operand(dy, &y.shape, y.dtype(), false),
    ))
}
