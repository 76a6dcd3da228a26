{# plain CUDA C++, kept out of Jinja: inline PTX operands look like Jinja tags #}{% raw %}
// ---- kerneldsl CUDA prelude: self-contained (no headers), so NVRTC alone compiles it ----
#define NAN __int_as_float(0x7fc00000)
#define INFINITY __int_as_float(0x7f800000)

// f16 / bf16 are 16-bit storage in registers and memory; conversions are single PTX cvts
static __device__ __forceinline__ float kd_h2f(unsigned short h) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
static __device__ __forceinline__ unsigned short kd_f2h(float f) {
    unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
static __device__ __forceinline__ float kd_bf2f(unsigned short h) {
    return __uint_as_float(((unsigned)h) << 16);
}
static __device__ __forceinline__ unsigned short kd_f2bf(float f) {
    // round to nearest even in one cvt; a NaN becomes the canonical NaN, as in kd_f2h (its
    // sign and payload are not kept: one instruction instead of six, and ptxas packs
    // neighbouring conversions into one F2FP)
    unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}

// short vectors: lanes in an array, moved as one 16/8/4/2-byte access when aligned
template <int B> struct kd_word;
template <> struct kd_word<16> { typedef uint4 type; };
template <> struct kd_word<8> { typedef uint2 type; };
template <> struct kd_word<4> { typedef unsigned type; };
template <> struct kd_word<2> { typedef unsigned short type; };
template <typename T, int N> struct alignas(sizeof(T) * N >= 16 ? 16 : sizeof(T) * N) kd_vec {
    T v[N];
    __device__ kd_vec() {}
    __device__ explicit kd_vec(int) {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = T(0);
    }
};
template <typename T, int N>
static __device__ __forceinline__ kd_vec<T, N> kd_vload(const T* p) {
    constexpr int B = sizeof(T) * N, W = B >= 16 ? 16 : B;
    typedef typename kd_word<W>::type word;
    kd_vec<T, N> r;
    if ((reinterpret_cast<unsigned long long>(p) & (W - 1)) == 0) {
#pragma unroll
        for (int i = 0; i < B / W; ++i) reinterpret_cast<word*>(r.v)[i] = reinterpret_cast<const word*>(p)[i];
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) r.v[i] = p[i];
    }
    return r;
}
template <typename T, int N>
static __device__ __forceinline__ void kd_vstore(T* p, const kd_vec<T, N>& x) {
    constexpr int B = sizeof(T) * N, W = B >= 16 ? 16 : B;
    typedef typename kd_word<W>::type word;
    if ((reinterpret_cast<unsigned long long>(p) & (W - 1)) == 0) {
#pragma unroll
        for (int i = 0; i < B / W; ++i) reinterpret_cast<word*>(p)[i] = reinterpret_cast<const word*>(x.v)[i];
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) p[i] = x.v[i];
    }
}

// plane (warp) operations; `mask` names the plane's live lanes, `n` counts them (a cube's
// last plane is partial when its size is not a multiple of 32)
template <typename T, typename F>
static __device__ __forceinline__ T kd_plane_reduce(T v, F f, unsigned mask, int lane, int n) {
    if (n == 32) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(mask, v, o));
        return v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        T w = __shfl_down_sync(mask, v, o);
        if (lane + o < n) v = f(v, w);
    }
    return __shfl_sync(mask, v, 0);
}
template <typename T>
static __device__ __forceinline__ T kd_plane_scan(T v, unsigned mask, int lane) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        T w = __shfl_up_sync(mask, v, o);
        if (lane >= o) v = v + w;
    }
    return v;
}
template <typename T>
static __device__ __forceinline__ T kd_plane_exscan(T v, unsigned mask, int lane) {
    T w = __shfl_up_sync(mask, kd_plane_scan(v, mask, lane), 1);
    return lane == 0 ? T(0) : w;
}

// matrix fragments, m16n16k16 as two mma.sync m16n8k16 (PTX ISA fragment layouts):
// a and b hold 8 16-bit values per lane in 4 registers, acc holds 8 floats per lane.
// kd_frag_rc gives the tile (row, col) of a lane's element i for role 0 (a), 1 (b), 2 (acc).
static __device__ __forceinline__ void kd_frag_rc(int role, int i, int lane, int& r, int& c) {
    const int g = lane >> 2, t = lane & 3;
    if (role == 0) {        // a: reg i/2 = (rows +8 for odd regs, cols +8 for regs 2,3)
        const int reg = i >> 1, h = i & 1;
        r = g + 8 * (reg & 1); c = 2 * t + h + 8 * (reg >> 1);
    } else if (role == 1) { // b: reg i/2 = (k +8 for odd regs, n +8 for regs 2,3)
        const int reg = i >> 1, h = i & 1;
        r = 2 * t + h + 8 * (reg & 1); c = g + 8 * (reg >> 1);
    } else {                // acc: elements 0-3 columns 0-7, 4-7 columns 8-15
        const int q = i & 3;
        r = g + 8 * (q >> 1); c = 2 * t + (q & 1) + 8 * (i >> 2);
    }
}
static __device__ __forceinline__ void kd_frag_fill16(unsigned* f, unsigned short h) {
    const unsigned w = (unsigned)h | ((unsigned)h << 16);
#pragma unroll
    for (int i = 0; i < 4; ++i) f[i] = w;
}
// gather load of an a/b tile from any memory, any offset and stride; `col` swaps the
// tile's row and column in memory (element (r, c) at off + c * ld + r)
template <typename P>
static __device__ __forceinline__ void kd_frag_gather16(unsigned* f, P base, long long off, long long ld,
                                                       int role, bool col, int lane) {
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
        int r, c;
        kd_frag_rc(role, i, lane, r, c);
        const int r1 = role == 0 ? r : r + 1, c1 = role == 0 ? c + 1 : c;
        const unsigned lo = (unsigned)base[col ? off + c * ld + r : off + r * ld + c];
        const unsigned hi = (unsigned)base[col ? off + c1 * ld + r1 : off + r1 * ld + c1];
        f[i >> 1] = lo | (hi << 16);
    }
}
// four 8x8 16-bit matrices from shared memory, lane l giving the address of row l % 8 of
// matrix l / 8; `trans` transposes each
static __device__ __forceinline__ void kd_ldsm_x4(unsigned* f, const unsigned short* p, bool trans) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    if (trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3]) : "r"(a));
}
// a/b tile from shared memory with ldmatrix (rows of 16 aligned bytes); `trans` when the
// tile's paired elements are not adjacent in memory (a col-major, b row-major)
static __device__ __forceinline__ void kd_frag_ldsm(unsigned* f, const unsigned short* base, long long off,
                                                    long long ld, bool col, bool trans, int lane) {
    const int j = lane >> 3, r8 = lane & 7, rb = 8 * (j & 1), cb = 8 * (j >> 1);
    kd_ldsm_x4(f, base + off + (col ? (cb + r8) * ld + rb : (rb + r8) * ld + cb), trans);
}
#define KD_MMA_M16N8K16(TY, c, a, b0, b1)                                                                \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 "                              \
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                 \
                 : "+f"((c)[0]), "+f"((c)[1]), "+f"((c)[2]), "+f"((c)[3])                                 \
                 : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"(b0), "r"(b1))
static __device__ __forceinline__ void kd_mma_f16(float* c, const unsigned* a, const unsigned* b) {
    KD_MMA_M16N8K16("f16", c, a, b[0], b[1]);
    KD_MMA_M16N8K16("f16", c + 4, a, b[2], b[3]);
}
static __device__ __forceinline__ void kd_mma_bf16(float* c, const unsigned* a, const unsigned* b) {
    KD_MMA_M16N8K16("bf16", c, a, b[0], b[1]);
    KD_MMA_M16N8K16("bf16", c + 4, a, b[2], b[3]);
}
// group fragments (kd.group_mma): a 64-row tile over 4 warps, warp g holding rows 16g ..
// 16g + 15 in mma.sync's m16n8k16 layouts, n8 block after n8 block (wgmma's layout too).
// Shared operands are in a layout of kd.tile_offset (kerneldsl/tile_layout.py): bands of W
// columns (16: the 32-byte swizzle, 64: the 128-byte one), rows of 2W bytes, the 16-byte
// chunks of a row xor-ed with its row (bits 4.. of the address with bits 7..).
template <int W>
static __device__ __forceinline__ const unsigned short* kd_tile_row(const unsigned short* t, int r, int c, int rows) {
    return t + (c / W) * rows * W + r * W + ((((c % W) >> 3) ^ ((r / (64 / W)) % (W / 8))) << 3) + (c & 7);
}
// a wgmma shared-memory descriptor: lbo, sbo in bytes (multiples of 16); layout 3: 32-byte
// swizzle, 1: 128-byte swizzle
static __device__ __forceinline__ unsigned long long kd_wg_desc(const void* p, unsigned lbo, unsigned sbo,
                                                                unsigned long long layout) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    return (unsigned long long)((a & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16)
           | ((unsigned long long)(sbo >> 4) << 32) | (layout << 62);
}
// kd.group_mma without wgmma: warp `w` of the group multiplies its 16 rows with mma.sync.
// A from registers (at == nullptr) or a tile of `ar` stored rows (atr: stored transposed);
// B a tile of `br` stored rows (btr: stored as N x K); AW, BW: the tiles' band widths.
template <int N, int K, bool BF16, int AW, int BW>
static __device__ __forceinline__ void kd_group_mma_sync(float* acc, const unsigned* areg, const unsigned short* at,
                                                         int ar, bool atr, const unsigned short* bt, int br,
                                                         bool btr, int w, int lane) {
    const int m = lane >> 3, r = lane & 7;
#pragma unroll
    for (int s = 0; s < K / 16; ++s) {
        unsigned a[4];
        if (at == nullptr) {
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = areg[4 * s + i];
        } else if (atr) {  // stored K x 64: rows k
            kd_ldsm_x4(a, kd_tile_row<AW>(at, 16 * s + 8 * (m >> 1) + r, 16 * w + 8 * (m & 1), ar), true);
        } else {
            kd_ldsm_x4(a, kd_tile_row<AW>(at, 16 * w + 8 * (m & 1) + r, 16 * s + 8 * (m >> 1), ar), false);
        }
#pragma unroll
        for (int j = 0; j < N / 8; j += 2) {
            const int jb = j + 1 < N / 8 ? j + (m >> 1) : j;  // lanes 16..31 load block j + 1
            unsigned b[4];
            if (btr)  // stored N x K: rows n
                kd_ldsm_x4(b, kd_tile_row<BW>(bt, 8 * jb + r, 16 * s + 8 * (m & 1), br), false);
            else
                kd_ldsm_x4(b, kd_tile_row<BW>(bt, 16 * s + 8 * (m & 1) + r, 8 * jb, br), true);
            if (BF16) {
                KD_MMA_M16N8K16("bf16", acc + 4 * j, a, b[0], b[1]);
                if (j + 1 < N / 8) KD_MMA_M16N8K16("bf16", acc + 4 * j + 4, a, b[2], b[3]);
            } else {
                KD_MMA_M16N8K16("f16", acc + 4 * j, a, b[0], b[1]);
                if (j + 1 < N / 8) KD_MMA_M16N8K16("f16", acc + 4 * j + 4, a, b[2], b[3]);
            }
        }
    }
}
// ---- end of prelude ----
{% endraw %}
