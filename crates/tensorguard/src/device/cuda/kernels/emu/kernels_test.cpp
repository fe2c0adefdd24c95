// Runs the kernels of reduce.cu and index.cu on the host (shim.h) against
// simple references: every reduction for every segment size, NaN and tie
// rules, var/std corrections, softmax, take with a fault, atomic adds of
// 8/16-bit types, cat, the integer matmul with a broadcast batch.
#include "shim.h"
#include "common_host.cuh"
#include "../reduce.cu"
#include "../index.cu"
#include <initializer_list>
static int fails = 0;
#define CHECK(c, ...) do { if (!(c)) { fails++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
Strided S(long long off, std::initializer_list<long long> sh, std::initializer_list<long long> st) {
    Strided s{}; s.offset = off; s.ndim = sh.size(); int i = 0;
    for (auto v : sh) s.shape[i++] = v; i = 0; for (auto v : st) s.strides[i++] = v;
    for (int d = s.ndim; d < 8; ++d) { s.shape[d] = 1; s.strides[d] = 0; }
    return s;
}
int groups[] = {1, 2, 4, 32, 256};
int main() {
    // 1. sum / mean over dims {0, 2} of [4, 5, 6] contiguous
    {
        std::vector<float> x(120); for (int i = 0; i < 120; ++i) x[i] = (float)(i % 7) - 2.5f;
        for (int g : groups) {
            std::vector<float> out(5, -1), mo(5, -1);
            Strided ol = S(0, {5}, {1}), outer = S(0, {5}, {6}), lanes = S(0, {4, 6}, {30, 1});
            launch(2, 256, [&] { tg_sum_f32(out.data(), ol, x.data(), outer, lanes, 5, 24, g); });
            launch(1, 256, [&] { tg_mean_f32(mo.data(), ol, x.data(), outer, lanes, 5, 24, g); });
            for (int j = 0; j < 5; ++j) {
                double r = 0; for (int a = 0; a < 4; ++a) for (int c = 0; c < 6; ++c) r += x[a * 30 + j * 6 + c];
                CHECK(out[j] == (float)r, "sum g=%d j=%d %f %f", g, j, out[j], r);
                CHECK(mo[j] == (float)((double)(float)r / 24), "mean g=%d j=%d", g, j);
            }
        }
    }
    // 2. argmax/argmin/max with ties and NaN, rows of 6, 3 rows
    {
        float nan = NAN;
        std::vector<float> x = {1, 5, 5, nan, 7, nan,   1, 5, 5, 2, -1, 5,   3, 0, -0.0f, 0, -4, -4};
        for (int g : groups) {
            std::vector<long long> am(3, -9), an(3, -9); std::vector<float> mx(3), mn(3);
            Strided ol = S(0, {3}, {1}), outer = S(0, {3}, {6}), lanes = S(0, {6}, {1});
            launch(1, 256, [&] { tg_argmax_f32(am.data(), ol, x.data(), outer, lanes, 3, 6, g); });
            launch(1, 256, [&] { tg_argmin_f32(an.data(), ol, x.data(), outer, lanes, 3, 6, g); });
            launch(1, 256, [&] { tg_max_f32(mx.data(), ol, x.data(), outer, lanes, 3, 6, g); });
            launch(1, 256, [&] { tg_min_f32(mn.data(), ol, x.data(), outer, lanes, 3, 6, g); });
            CHECK(am[0] == 3 && an[0] == 3 && std::isnan(mx[0]) && std::isnan(mn[0]), "nan row g=%d %lld %lld", g, am[0], an[0]);
            CHECK(am[1] == 1 && an[1] == 4 && mx[1] == 5 && mn[1] == -1, "ties g=%d %lld %lld", g, am[1], an[1]);
            CHECK(am[2] == 0 && an[2] == 4, "row3 g=%d %lld %lld", g, am[2], an[2]);
            // max_dim along dim 1 with values and indices into strided outputs
            std::vector<float> v(6, 0); std::vector<long long> ix(3, -9);
            Strided vl = S(0, {3}, {2}), il = S(0, {3}, {1});
            launch(1, 256, [&] { tg_min_dim_f32(v.data(), vl, ix.data(), il, x.data(), outer, lanes, 3, 6, g); });
            CHECK(std::isnan(v[0]) && v[2] == -1 && v[4] == -4 && ix[0] == 3 && ix[1] == 4 && ix[2] == 4, "min_dim g=%d", g);
        }
    }
    // 3. var/std over a long lane (block mode) and short ones, correction 1 and 0
    {
        std::vector<double> x(3000); for (int i = 0; i < 3000; ++i) x[i] = std::sin(i * 0.37) * 10 + 3;
        for (int g : groups) for (double corr : {0.0, 1.0, 2999.5}) {
            std::vector<double> out(3);
            Strided ol = S(0, {3}, {1}), outer = S(0, {3}, {1000}), lanes = S(0, {1000}, {1});
            launch(1, 256, [&] { tg_var_f64(out.data(), ol, x.data(), outer, lanes, 3, 1000, g, corr, 1); });
            for (int j = 0; j < 3; ++j) {
                double m = 0; for (int i = 0; i < 1000; ++i) m += x[j * 1000 + i]; m /= 1000;
                double m2 = 0; for (int i = 0; i < 1000; ++i) m2 += (x[j * 1000 + i] - m) * (x[j * 1000 + i] - m);
                double r = std::sqrt(m2 / std::fmax(1000 - corr, 0.0));
                CHECK(std::fabs(out[j] - r) <= 1e-12 * std::fabs(r) || (std::isinf(r) && std::isinf(out[j])), "std g=%d corr=%f %g %g", g, corr, out[j], r);
            }
        }
    }
    // 4. int sums (wrapping) and int mean, i32 via i64 is the op path; u8 prod wraps
    {
        std::vector<int> x = {7, -3, 2, 5, 1, 1};
        std::vector<unsigned char> u = {200, 100, 3, 2};
        for (int g : groups) {
            std::vector<int> s(2), m(2); std::vector<unsigned char> p(1), su(1);
            Strided ol = S(0, {2}, {1}), outer = S(0, {2}, {3}), lanes = S(0, {3}, {1});
            launch(1, 256, [&] { tg_sum_i32(s.data(), ol, x.data(), outer, lanes, 2, 3, g); });
            launch(1, 256, [&] { tg_mean_i32(m.data(), ol, x.data(), outer, lanes, 2, 3, g); });
            CHECK(s[0] == 6 && s[1] == 7 && m[0] == 2 && m[1] == 2, "int g=%d %d %d %d %d", g, s[0], s[1], m[0], m[1]);
            Strided o1 = S(0, {1}, {1}), out1 = S(0, {1}, {1}), l4 = S(0, {4}, {1});
            launch(1, 256, [&] { tg_prod_u8(p.data(), o1, u.data(), out1, l4, 1, 4, g); });
            launch(1, 256, [&] { tg_sum_u8(su.data(), o1, u.data(), out1, l4, 1, 4, g); });
            CHECK(p[0] == (unsigned char)(200 * 100 * 3 * 2) && su[0] == (unsigned char)305, "u8 g=%d %d %d", g, p[0], su[0]);
        }
    }
    // 5. softmax / log_softmax along dim 0 of [5, 3] (strided rows)
    {
        std::vector<float> x = {1, 2, 3, 4, 5, 6, -1, 0, 1, 100, 2, 3, 0.5, 0.25, 0};
        for (int g : groups) for (int lg : {0, 1}) {
            std::vector<float> o(15, -7);
            Strided ol = S(0, {3}, {1}), outer = S(0, {3}, {1});
            launch(1, 256, [&] { tg_softmax_f32(o.data(), ol, 3, x.data(), outer, 3, 3, 5, g, lg); });
            for (int c = 0; c < 3; ++c) {
                double m = -INFINITY; for (int r = 0; r < 5; ++r) m = std::fmax(m, x[r * 3 + c]);
                double s = 0; for (int r = 0; r < 5; ++r) s += std::exp(x[r * 3 + c] - m);
                for (int r = 0; r < 5; ++r) {
                    double v = x[r * 3 + c] - m; double ref = lg ? v - std::log(s) : std::exp(v) / s;
                    CHECK(std::fabs(o[r * 3 + c] - ref) <= 1e-6 * (1 + std::fabs(ref)), "softmax g=%d lg=%d %d,%d %g %g", g, lg, r, c, o[r*3+c], ref);
                }
            }
        }
    }
    // 6. bf16 / f16 sums
    {
        std::vector<tg_bf16> x(300); for (int i = 0; i < 300; ++i) x[i] = tg_f2b(1.0f + (i % 3));
        std::vector<tg_bf16> o(1);
        Strided o1 = S(0, {1}, {1}), l = S(0, {300}, {1});
        launch(1, 256, [&] { tg_sum_bf16(o.data(), o1, x.data(), o1, l, 1, 300, 256); });
        CHECK(tg_b2f(o[0]) == 600.0f, "bf16 sum %f", tg_b2f(o[0]));
    }
    // 7. take (index_select dim 1 of [2, 4] with index [3, 0, 3, 9]) with a fault
    {
        std::vector<float> src = {0, 1, 2, 3, 10, 11, 12, 13};
        std::vector<long long> idx = {3, 0, 3, 9};
        std::vector<float> out(8, -1);
        FaultRecord rec{};
        Strided ol = S(0, {2, 4}, {4, 1}), sl = S(0, {2, 4}, {4, 0}), il = S(0, {2, 4}, {0, 1});
        launch(1, 256, [&] { tg_take_f32(out.data(), ol, src.data(), sl, 1, 4, 1, idx.data(), il, 8, &rec, 42); });
        CHECK(out[0] == 3 && out[1] == 0 && out[2] == 3 && out[3] == -1 && out[4] == 13 && out[5] == 10 && out[7] == -1, "take");
        CHECK(rec.code == 1 && rec.launch == 42 && rec.a == 9 && rec.b == 4 && rec.c == 1, "fault %u %lld", rec.code, rec.a);
    }
    // 8. index_add along dim 0 into [3, 2] of bf16, f16, u8, i64 and f32 with repeated indices
    {
        std::vector<long long> idx = {0, 2, 0, 2, 2};
        Strided ol = S(0, {5, 2}, {0, 1}), sl = S(0, {5, 2}, {2, 1}), il = S(0, {5, 2}, {1, 0});
        std::vector<tg_bf16> ob(6, tg_f2b(1)), sb(10, tg_f2b(0.5f));
        std::vector<tg_half> oh(6, tg_f2h(1)), sh(10, tg_f2h(0.25f));
        std::vector<unsigned char> ou(6, 250), su(10, 3);
        std::vector<long long> oi(6, 1), si(10, -2);
        FaultRecord rec{};
        launch(2, 256, [&] {
            tg_index_add_bf16(ob.data(), ol, 2, 3, 0, sb.data(), sl, idx.data(), il, 10, &rec, 1);
            tg_index_add_f16(oh.data(), ol, 2, 3, 0, sh.data(), sl, idx.data(), il, 10, &rec, 1);
            tg_index_add_u8(ou.data(), ol, 2, 3, 0, su.data(), sl, idx.data(), il, 10, &rec, 1);
            tg_index_add_i64(oi.data(), ol, 2, 3, 0, si.data(), sl, idx.data(), il, 10, &rec, 1);
        });
        for (int c = 0; c < 2; ++c) {
            CHECK(tg_b2f(ob[0 + c]) == 2.0f && tg_b2f(ob[2 + c]) == 1 && tg_b2f(ob[4 + c]) == 2.5f, "bf16 add");
            CHECK(tg_h2f(oh[0 + c]) == 1.5f && tg_h2f(oh[4 + c]) == 1.75f, "f16 add");
            CHECK(ou[0 + c] == 0 && ou[2 + c] == 250 && ou[4 + c] == 3, "u8 add %d %d", ou[c], ou[4 + c]);
            CHECK(oi[0 + c] == -3 && oi[2 + c] == 1 && oi[4 + c] == -5, "i64 add");
        }
        CHECK(rec.code == 0, "no fault");
    }
    // 9. cat copy and integer matmul [2, 2x3] @ [2, 3x2] with b broadcast (batch stride 0)
    {
        std::vector<int> a = {1, 2, 3, 4, 5, 6, -1, 0, 2, 1, 1, 1}, b = {1, 0, 0, 1, 1, 1};
        std::vector<int> o(8, -9);
        Strided ob = S(0, {2}, {4}), ab = S(0, {2}, {6}), bb = S(0, {2}, {0});
        launch(1, 256, [&] { tg_matmul_i32(o.data(), ob, 2, 1, a.data(), ab, 3, 1, b.data(), bb, 2, 1, 2, 2, 3, 8); });
        int ref[8] = {4, 5, 10, 11, 1, 2, 2, 2};
        for (int i = 0; i < 8; ++i) CHECK(o[i] == ref[i], "matmul %d: %d vs %d", i, o[i], ref[i]);
        std::vector<double> src = {1, 2, 3, 4}, dst(8, 0);
        Strided dl = S(4, {2, 2}, {1, 2}), sl = S(0, {2, 2}, {2, 1});
        launch(1, 256, [&] { tg_cat_f64(dst.data(), dl, src.data(), sl, 4); });
        CHECK(dst[4] == 1 && dst[6] == 2 && dst[5] == 3 && dst[7] == 4, "cat");
    }
#ifdef SANITY
    CHECK(false, "sanity");
#endif
    printf("%s (%d failures)\n", fails ? "FAILED" : "ok", fails);
    return fails != 0;
}
