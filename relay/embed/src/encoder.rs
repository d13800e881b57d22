//! A BERT encoder forward pass on CPU, written for sentence-embedding throughput.
//!
//! The sequences of a batch are packed end to end, without padding: every dense layer (query/key/value, attention
//! output, the feed-forward pair — nearly all of the arithmetic) runs as one matrix product over every real token of
//! the batch, and only attention runs per sequence (in parallel across sequences). A padded batch would multiply
//! padding rows too, and a batch of one text per call leaves the matrix kernels small; packing avoids both.
//!
//! Supports the post-norm BERT layout with absolute positions and exact (erf) GELU, which is what
//! sentence-transformers' MiniLM and BERT-family checkpoints such as BGE, E5 and GTE small use. Anything else is refused at
//! load ([`Encoder::supports`]) and the caller uses the general candle implementation instead.

use rayon::prelude::*;
use safetensors::SafeTensors;
use serde::Deserialize;

/// The configuration fields this encoder reads (`config.json`).
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default = "default_position_type")]
    pub position_embedding_type: String,
}

fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_act() -> String {
    "gelu".into()
}
fn default_position_type() -> String {
    "absolute".into()
}

/// A tokenised sequence: token ids and token type ids, of equal length.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    pub ids: Vec<u32>,
    pub types: Vec<u32>,
}

#[derive(Debug)]
struct Norm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

/// A dense layer with its weight stored `[in][out]` (the transpose of the checkpoint's `[out][in]`).
#[derive(Debug)]
struct Linear {
    w: Vec<f32>,
    b: Vec<f32>,
    inp: usize,
    out: usize,
}

#[derive(Debug)]
struct Layer {
    /// Query, key and value fused: output columns `[q | k | v]`.
    qkv: Linear,
    attn_out: Linear,
    attn_norm: Norm,
    up: Linear,
    down: Linear,
    out_norm: Norm,
}

/// A loaded encoder.
#[derive(Debug)]
pub struct Encoder {
    hidden: usize,
    heads: usize,
    eps: f32,
    vocab: usize,
    max_positions: usize,
    type_vocab: usize,
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    emb_norm: Norm,
    layers: Vec<Layer>,
}

impl Encoder {
    /// Whether this encoder implements the architecture `config` describes.
    pub fn supports(config: &BertConfig) -> bool {
        config.hidden_act == "gelu"
            && config.position_embedding_type == "absolute"
            && config.num_attention_heads > 0
            && config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
    }

    /// Loads the weights from a safetensors buffer (names with or without a `bert.` prefix).
    pub fn load(config: &BertConfig, weights: &[u8]) -> Result<Self, String> {
        if !Self::supports(config) {
            return Err(format!(
                "unsupported architecture (hidden_act {:?}, position embeddings {:?})",
                config.hidden_act, config.position_embedding_type
            ));
        }
        let st = SafeTensors::deserialize(weights).map_err(|e| e.to_string())?;
        let prefix = if st.names().iter().any(|n| n.starts_with("bert.")) {
            "bert."
        } else {
            ""
        };
        let h = config.hidden_size;
        let inter = config.intermediate_size;
        let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>, String> {
            let full = format!("{prefix}{name}");
            let t = st.tensor(&full).map_err(|e| format!("{full}: {e}"))?;
            if t.dtype() != safetensors::Dtype::F32 {
                return Err(format!("{full}: dtype {:?}, expected F32", t.dtype()));
            }
            if t.shape() != shape {
                return Err(format!("{full}: shape {:?}, expected {shape:?}", t.shape()));
            }
            Ok(t.data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect())
        };
        let norm = |name: &str| -> Result<Norm, String> {
            Ok(Norm {
                gamma: get(&format!("{name}.weight"), &[h])?,
                beta: get(&format!("{name}.bias"), &[h])?,
            })
        };
        let linear = |name: &str, inp: usize, out: usize| -> Result<Linear, String> {
            let w = get(&format!("{name}.weight"), &[out, inp])?;
            Ok(Linear {
                w: transpose(&w, out, inp),
                b: get(&format!("{name}.bias"), &[out])?,
                inp,
                out,
            })
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for i in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{i}");
            let q = linear(&format!("{p}.attention.self.query"), h, h)?;
            let k = linear(&format!("{p}.attention.self.key"), h, h)?;
            let v = linear(&format!("{p}.attention.self.value"), h, h)?;
            layers.push(Layer {
                qkv: fuse_columns(&[q, k, v]),
                attn_out: linear(&format!("{p}.attention.output.dense"), h, h)?,
                attn_norm: norm(&format!("{p}.attention.output.LayerNorm"))?,
                up: linear(&format!("{p}.intermediate.dense"), h, inter)?,
                down: linear(&format!("{p}.output.dense"), inter, h)?,
                out_norm: norm(&format!("{p}.output.LayerNorm"))?,
            });
        }
        Ok(Self {
            hidden: h,
            heads: config.num_attention_heads,
            eps: config.layer_norm_eps as f32,
            vocab: config.vocab_size,
            max_positions: config.max_position_embeddings,
            type_vocab: config.type_vocab_size,
            word: get("embeddings.word_embeddings.weight", &[config.vocab_size, h])?,
            position: get(
                "embeddings.position_embeddings.weight",
                &[config.max_position_embeddings, h],
            )?,
            token_type: get(
                "embeddings.token_type_embeddings.weight",
                &[config.type_vocab_size, h],
            )?,
            emb_norm: norm("embeddings.LayerNorm")?,
            layers,
        })
    }

    /// The output dimension.
    pub fn dim(&self) -> usize {
        self.hidden
    }

    /// The mean-pooled, L2-normalised last hidden state of each sequence.
    pub fn embed(&self, seqs: &[Tokens]) -> Result<Vec<Vec<f32>>, String> {
        let h = self.hidden;
        let mut starts = Vec::with_capacity(seqs.len());
        let mut total = 0usize;
        for (n, s) in seqs.iter().enumerate() {
            if s.ids.is_empty() || s.ids.len() != s.types.len() {
                return Err(format!(
                    "sequence {n}: empty or ids/types of different lengths"
                ));
            }
            if s.ids.len() > self.max_positions {
                return Err(format!(
                    "sequence {n}: {} tokens, the model takes at most {}",
                    s.ids.len(),
                    self.max_positions
                ));
            }
            starts.push(total);
            total += s.ids.len();
        }
        if total == 0 {
            return Ok(Vec::new());
        }
        let lens: Vec<usize> = seqs.iter().map(|s| s.ids.len()).collect();

        // Embeddings: word + position + token type, then layer norm.
        let mut x = vec![0f32; total * h];
        for (s, &start) in seqs.iter().zip(&starts) {
            for (p, (&id, &ty)) in s.ids.iter().zip(&s.types).enumerate() {
                let (id, ty) = (id as usize, ty as usize);
                if id >= self.vocab || ty >= self.type_vocab {
                    return Err(format!("token id {id} or type {ty} outside the vocabulary"));
                }
                let row = &mut x[(start + p) * h..(start + p + 1) * h];
                let w = &self.word[id * h..(id + 1) * h];
                let pe = &self.position[p * h..(p + 1) * h];
                let te = &self.token_type[ty * h..(ty + 1) * h];
                for i in 0..h {
                    row[i] = w[i] + pe[i] + te[i];
                }
            }
        }
        layer_norm(&mut x, h, &self.emb_norm, self.eps);

        let mut qkv = vec![0f32; total * 3 * h];
        let mut ctx = vec![0f32; total * h];
        let mut up = vec![0f32; total * self.layers.first().map_or(0, |l| l.up.out)];
        for layer in &self.layers {
            dense(&x, total, &layer.qkv, &mut qkv, None);
            self.attention(&qkv, &starts, &lens, &mut ctx);
            // x = norm(x + ctx·Wo + bo)
            let residual = std::mem::take(&mut x);
            x = vec![0f32; total * h];
            dense(&ctx, total, &layer.attn_out, &mut x, Some(&residual));
            layer_norm(&mut x, h, &layer.attn_norm, self.eps);
            dense(&x, total, &layer.up, &mut up, None);
            up.par_chunks_mut(4096)
                .for_each(|c| c.iter_mut().for_each(|v| *v = gelu(*v)));
            let residual = std::mem::take(&mut x);
            x = vec![0f32; total * h];
            dense(&up, total, &layer.down, &mut x, Some(&residual));
            layer_norm(&mut x, h, &layer.out_norm, self.eps);
        }

        Ok(starts
            .iter()
            .zip(&lens)
            .map(|(&start, &len)| {
                let mut v = vec![0f32; h];
                for row in x[start * h..(start + len) * h].chunks_exact(h) {
                    for (a, b) in v.iter_mut().zip(row) {
                        *a += b;
                    }
                }
                for a in v.iter_mut() {
                    *a /= len as f32;
                }
                super::l2_normalize(&mut v);
                v
            })
            .collect())
    }

    /// Scaled dot-product attention of every head of every sequence; writes `ctx` (`[tokens][hidden]`).
    fn attention(&self, qkv: &[f32], starts: &[usize], lens: &[usize], ctx: &mut [f32]) {
        let h = self.hidden;
        let d = h / self.heads;
        let scale = 1.0 / (d as f32).sqrt();
        // One mutable slice of `ctx` per sequence, so sequences run in parallel without sharing rows.
        let mut parts: Vec<&mut [f32]> = Vec::with_capacity(lens.len());
        let mut rest = ctx;
        for &len in lens {
            let (head, tail) = rest.split_at_mut(len * h);
            parts.push(head);
            rest = tail;
        }
        parts
            .into_par_iter()
            .zip(starts.par_iter().zip(lens.par_iter()))
            .for_each(|(out, (&start, &len))| {
                let mut scores = vec![0f32; len * len];
                let base = start * 3 * h;
                for head in 0..self.heads {
                    // scores = Q·Kᵀ, Q and K read in place from the packed qkv rows.
                    let q = StridedView {
                        data: qkv,
                        offset: base + head * d,
                        rows: len,
                        cols: d,
                        rs: 3 * h,
                        cs: 1,
                    };
                    let kt = StridedView {
                        data: qkv,
                        offset: base + h + head * d,
                        rows: d,
                        cols: len,
                        rs: 1,
                        cs: 3 * h,
                    };
                    matmul(&mut scores, 0, len, q, kt, false, false);
                    for row in scores.chunks_exact_mut(len) {
                        softmax(row, scale);
                    }
                    // ctx[:, head] = P·V
                    let p = StridedView {
                        data: &scores,
                        offset: 0,
                        rows: len,
                        cols: len,
                        rs: len,
                        cs: 1,
                    };
                    let v = StridedView {
                        data: qkv,
                        offset: base + 2 * h + head * d,
                        rows: len,
                        cols: d,
                        rs: 3 * h,
                        cs: 1,
                    };
                    matmul(out, head * d, h, p, v, false, false);
                }
            });
    }
}

/// `out = input·W + b (+ residual)`, over `rows` packed rows.
fn dense(input: &[f32], rows: usize, l: &Linear, out: &mut [f32], residual: Option<&[f32]>) {
    let out = &mut out[..rows * l.out];
    for (r, row) in out.chunks_exact_mut(l.out).enumerate() {
        row.copy_from_slice(&l.b);
        if let Some(res) = residual {
            for (o, x) in row.iter_mut().zip(&res[r * l.out..(r + 1) * l.out]) {
                *o += x;
            }
        }
    }
    let a = StridedView {
        data: input,
        offset: 0,
        rows,
        cols: l.inp,
        rs: l.inp,
        cs: 1,
    };
    let w = StridedView {
        data: &l.w,
        offset: 0,
        rows: l.inp,
        cols: l.out,
        rs: l.out,
        cs: 1,
    };
    matmul(out, 0, l.out, a, w, true, true);
}

/// A read-only matrix inside a slice: element `(i, j)` is `data[offset + i·rs + j·cs]`.
#[derive(Clone, Copy)]
struct StridedView<'a> {
    data: &'a [f32],
    offset: usize,
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl StridedView<'_> {
    /// Panics unless every element lies inside `data`.
    fn check(&self) {
        if self.rows == 0 || self.cols == 0 {
            return;
        }
        let last = self.offset + (self.rows - 1) * self.rs + (self.cols - 1) * self.cs;
        assert!(last < self.data.len(), "matrix view out of bounds");
    }
}

/// `dst[dst_offset + i·dst_rs + j] (+)= (a·b)[i][j]`: a row-major destination with unit column stride, added to
/// when `accumulate` (callers pre-fill it with the bias and residual), overwritten otherwise. `parallel` lets the
/// kernel use the rayon pool.
fn matmul(
    dst: &mut [f32],
    dst_offset: usize,
    dst_rs: usize,
    a: StridedView<'_>,
    b: StridedView<'_>,
    accumulate: bool,
    parallel: bool,
) {
    assert_eq!(a.cols, b.rows, "inner dimensions differ");
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if m == 0 || n == 0 {
        return;
    }
    assert!(k > 0, "empty inner dimension");
    a.check();
    b.check();
    assert!(dst_rs >= n, "destination rows overlap");
    assert!(
        dst_offset + (m - 1) * dst_rs + n <= dst.len(),
        "destination out of bounds"
    );
    let parallelism = if parallel {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: every element the kernel reads or writes was bounds-checked above (non-negative strides, views and
    // destination inside their slices); `dst` is a unique borrow, so it aliases neither input, and destination rows
    // do not overlap (dst_rs ≥ n, unit column stride).
    #[allow(unsafe_code)]
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr().add(dst_offset),
            1,
            dst_rs as isize,
            accumulate,
            a.data.as_ptr().add(a.offset),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr().add(b.offset),
            b.cs as isize,
            b.rs as isize,
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            parallelism,
        );
    }
}

fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0f32; w.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = w[r * cols + c];
        }
    }
    t
}

/// Concatenates the output columns of layers with the same input width.
fn fuse_columns(parts: &[Linear]) -> Linear {
    let inp = parts[0].inp;
    let out: usize = parts.iter().map(|p| p.out).sum();
    let mut w = Vec::with_capacity(inp * out);
    for r in 0..inp {
        for p in parts {
            w.extend_from_slice(&p.w[r * p.out..(r + 1) * p.out]);
        }
    }
    Linear {
        w,
        b: parts.iter().flat_map(|p| p.b.iter().copied()).collect(),
        inp,
        out,
    }
}

fn layer_norm(x: &mut [f32], h: usize, n: &Norm, eps: f32) {
    x.par_chunks_mut(h * 64).for_each(|block| {
        for row in block.chunks_exact_mut(h) {
            let mean = row.iter().sum::<f32>() / h as f32;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / h as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for ((v, g), b) in row.iter_mut().zip(&n.gamma).zip(&n.beta) {
                *v = (*v - mean) * inv * g + b;
            }
        }
    });
}

fn softmax(row: &mut [f32], scale: f32) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) * scale;
    let mut sum = 0f32;
    for v in row.iter_mut() {
        *v = (*v * scale - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in row.iter_mut() {
        *v *= inv;
    }
}

/// Exact GELU: x·Φ(x) = ½x(1 + erf(x/√2)).
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// erf in f64 by Abramowitz & Stegun 7.1.26 (absolute error ≤ 1.5e-7, below f32 resolution near 1).
fn erf(x: f32) -> f32 {
    let x = x as f64;
    let sign = if x < 0.0 { -1.0 } else { 1.0 };
    let x = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    (sign * (1.0 - poly * (-x * x).exp())) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0f32, 0.0f64),
            (0.5, 0.520_499_877_8),
            (1.0, 0.842_700_792_9),
            (2.0, 0.995_322_265),
            (-1.0, -0.842_700_792_9),
        ] {
            assert!((erf(x) as f64 - want).abs() < 3e-7, "erf({x}) = {}", erf(x));
        }
    }

    #[test]
    fn matmul_handles_strides_and_accumulates() {
        // a = [[1,2],[3,4]], b = transpose view of [[5,6],[7,8]] → bᵀ = [[5,7],[6,8]]
        let a = [1.0f32, 2.0, 3.0, 4.0];
        let b = [5.0f32, 6.0, 7.0, 8.0];
        let mut dst = vec![1.0f32; 4];
        let av = StridedView {
            data: &a,
            offset: 0,
            rows: 2,
            cols: 2,
            rs: 2,
            cs: 1,
        };
        let bt = StridedView {
            data: &b,
            offset: 0,
            rows: 2,
            cols: 2,
            rs: 1,
            cs: 2,
        };
        matmul(&mut dst, 0, 2, av, bt, true, false);
        // a·bᵀ = [[1·5+2·6, 1·7+2·8], [3·5+4·6, 3·7+4·8]] = [[17, 23], [39, 53]], plus the 1s already there.
        assert_eq!(dst, vec![18.0, 24.0, 40.0, 54.0]);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn matmul_refuses_views_outside_their_slice() {
        let a = [0.0f32; 3];
        let mut dst = vec![0.0f32; 4];
        let av = StridedView {
            data: &a,
            offset: 0,
            rows: 2,
            cols: 2,
            rs: 2,
            cs: 1,
        };
        matmul(&mut dst, 0, 2, av, av, false, false);
    }
}

#[cfg(test)]
mod matmul_vs_naive {
    use super::*;

    #[test]
    fn strided_products_match_a_naive_loop() {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 5, 4),
            (17, 64, 33),
            (40, 384, 1152),
            (9, 9, 64),
        ] {
            for &(a_t, b_t) in &[(false, false), (false, true), (true, false), (true, true)] {
                let a: Vec<f32> = (0..m * k + 3).map(|_| next()).collect();
                let b: Vec<f32> = (0..k * n + 5).map(|_| next()).collect();
                let av = if a_t {
                    StridedView {
                        data: &a,
                        offset: 3,
                        rows: m,
                        cols: k,
                        rs: 1,
                        cs: m,
                    }
                } else {
                    StridedView {
                        data: &a,
                        offset: 3,
                        rows: m,
                        cols: k,
                        rs: k,
                        cs: 1,
                    }
                };
                let bv = if b_t {
                    StridedView {
                        data: &b,
                        offset: 5,
                        rows: k,
                        cols: n,
                        rs: 1,
                        cs: k,
                    }
                } else {
                    StridedView {
                        data: &b,
                        offset: 5,
                        rows: k,
                        cols: n,
                        rs: n,
                        cs: 1,
                    }
                };
                let at = |i: usize, j: usize| av.data[av.offset + i * av.rs + j * av.cs];
                let bt = |i: usize, j: usize| bv.data[bv.offset + i * bv.rs + j * bv.cs];
                let mut dst = vec![0.25f32; m * (n + 2)];
                for acc in [true, false] {
                    dst.iter_mut().for_each(|v| *v = 0.25);
                    matmul(&mut dst, 1, n + 2, av, bv, acc, true);
                    for i in 0..m {
                        for j in 0..n {
                            let want: f32 = (0..k).map(|x| at(i, x) * bt(x, j)).sum::<f32>()
                                + if acc { 0.25 } else { 0.0 };
                            let got = dst[1 + i * (n + 2) + j];
                            assert!(
                                (got - want).abs() < 1e-3,
                                "{m}x{k}x{n} a_t={a_t} b_t={b_t} acc={acc} ({i},{j}): {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}
