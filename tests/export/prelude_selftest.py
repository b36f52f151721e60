
# --- appended by tests/export_jax.rs: checks of the prelude's HLO reading -----------------
def main(argv):
    two_by_four = [0, 1, 2, 3, 4, 5, 6, 7]
    cases = [
        ("x = f32[4] all-reduce(y), replica_groups={{0,4},{1,5},{2,6},{3,7}}, to_apply=s",
         [[0, 4], [1, 5], [2, 6], [3, 7]]),
        ("x = f32[4] all-reduce(y), replica_groups=[2,4]<=[8], to_apply=s",
         [[0, 1, 2, 3], [4, 5, 6, 7]]),
        ("x = f32[4] all-reduce(y), replica_groups=[4,2]<=[2,4]T(1,0), to_apply=s",
         [[0, 4], [1, 5], [2, 6], [3, 7]]),
        ("x = f32[4] all-reduce(y), replica_groups=mesh['a'=2,'b'=4] {'b'}, to_apply=s",
         [[0, 1, 2, 3], [4, 5, 6, 7]]),
        ("x = f32[4] all-reduce(y), replica_groups=mesh['a'=2,'b'=4] {'a'}, to_apply=s",
         [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ]
    for line, want in cases:
        got = replica_groups(line, two_by_four)
        assert got == want, (line, got, want)
    # Ranks that are not 0..n: positions map to them.
    assert replica_groups("replica_groups={{0,1}}", [4, 5]) == [[4, 5]]
    hlo = "\n".join([
        "  %a = (f32[2]{0}, f32[]) all-reduce(%p, %q), replica_groups={{0,1}}, metadata={op_name=\"jit(f)/transpose(jvp(g))\"}",
        "  %b = f32[4]{0} all-gather-start(%p), replica_groups={{0,1}}",
        "  %c = (f32[2]{0}, f32[4]{0}) all-gather-start(%p), replica_groups={{0,1}}",
        "  %d = f32[4]{0} all-gather-done(%c)",
        "  %e = f32[2]{0} reduce-scatter(%p), replica_groups={{0,1}}",
    ])
    counts = count_collectives(hlo, [0, 1])
    assert counts["all-reduce"]["count"] == 2 and counts["all-reduce"]["backward"] == 2, counts
    assert counts["all-gather"]["count"] == 2, counts
    assert counts["reduce-scatter"]["count"] == 1, counts
    print(json.dumps({"losses": [0.0, 0.0], "ok": True}))
