"""Autotuning and the tuning cache on the CPU backend with NumPy: the
candidates and their report, autotune's result against the float64 oracle,
where a plan's configuration came from, the cache's byte and file round
trips, corrupt buffers, the accuracy guard (through the library's test hook
FMHA_SPLITK_TEST_CORRUPT_CANDIDATE), the time budget, bad options, and plans
whose partition the problem fixes."""
import numpy as np
import pytest

import fmha_splitk
import reference
from conftest import aligned_bytes, relative_error

F16_BOUND = 1e-3  # DESIGN section 6: fp16 inputs

# Long enough that the CPU's balanced partition has several candidates
# whatever its thread count (tests/cpu/test_autotune.cpp tunes the same).
PROBLEM = dict(backend="cpu", batch=2, max_q_seqlen=1, max_kv_seqlen=2048, heads_q=4, heads_kv=2, head_dim_qk=64,
               q_dtype="f16")
# Few runs per candidate: the suite checks behaviour, not speed.
QUICK = dict(warmup_runs=1, timed_runs=3)


@pytest.fixture(autouse=True)
def empty_cache():
    """Each test starts and ends with an empty process-wide tuning cache."""
    fmha_splitk.tuning_cache_clear()
    yield
    fmha_splitk.tuning_cache_clear()


@pytest.fixture
def data(rng):
    q = rng.standard_normal((2, 1, 4, 64)).astype(np.float16)
    k = rng.standard_normal((2, 2048, 2, 64)).astype(np.float16)
    v = rng.standard_normal((2, 2048, 2, 64)).astype(np.float16)
    o = np.full(q.shape, np.nan, dtype=np.float16)
    lse = np.full((2, 4, 1), np.nan, dtype=np.float32)
    return q, k, v, o, lse


def check_against_reference(q, k, v, o, lse):
    ref_o, ref_lse = reference.attention(q, k, v)
    assert relative_error(o, ref_o) < F16_BOUND
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-4, atol=1e-4)


def cache_with_one_entry(data):
    """Tunes a plan of PROBLEM and returns the saved cache."""
    q, k, v, o, lse = data
    with fmha_splitk.Plan(**PROBLEM) as plan:
        plan.autotune(q, k, v, o, lse=lse, **QUICK)
    assert fmha_splitk.tuning_cache_entries() == 1
    return fmha_splitk.tuning_cache_save()


def test_candidates_before_tuning():
    with fmha_splitk.Plan(**PROBLEM) as plan:
        configs = plan.configs()
        assert len(configs) > 1
        assert [c.index for c in configs] == list(range(len(configs)))
        first = configs[0]
        assert first.heuristic and first.selected
        assert all(not c.heuristic and not c.selected for c in configs[1:])
        assert all(c.tune_state == fmha_splitk.TuneState.UNTIMED and c.time_us == -1 and c.error_ratio == -1
                   for c in configs)
        assert all(c.name and c.min_chunk_keys > 0 for c in configs)
        info = plan.info
        assert info.config_index == 0 and info.config_source == fmha_splitk.ConfigSource.HEURISTIC
        assert first.workspace_size == info.workspace_size
        assert plan.config(len(configs) - 1) == configs[-1]
        with pytest.raises(fmha_splitk.InvalidArgumentError, match="index") as caught:
            plan.config(len(configs))
        assert caught.value.function == "fmha_splitk_get_plan_config"
        with pytest.raises(ValueError, match="outside"):
            plan.config(2**32)  # would wrap to 0 in an int32
    with pytest.raises(ValueError, match="closed"):
        plan.configs()


def test_autotune_matches_the_reference_and_fills_the_cache(data):
    q, k, v, o, lse = data
    with fmha_splitk.Plan(**PROBLEM) as plan:
        chosen = plan.autotune(q, k, v, o, lse=lse, **QUICK)
        # O and LSE hold the winner's result.
        check_against_reference(q, k, v, o, lse)
        info = plan.info
        assert info.config_source == fmha_splitk.ConfigSource.AUTOTUNE
        assert isinstance(chosen, fmha_splitk.Config)
        assert chosen.index == info.config_index and chosen.selected
        assert chosen.tune_state == fmha_splitk.TuneState.ACCEPTED
        assert info.workspace_size == chosen.workspace_size == plan.workspace_size
        for config in plan.configs():
            assert config.tune_state == fmha_splitk.TuneState.ACCEPTED, config.name
            assert config.time_us >= 0 and 0 <= config.error_ratio <= 1, config.name
            assert chosen.time_us <= config.time_us, config.name
            assert config.selected == (config.index == chosen.index)
        assert fmha_splitk.tuning_cache_entries() == 1
        # The tuned plan runs with a caller's workspace of its new size.
        o[...] = np.nan
        plan.run(q=q, k=k, v=v, o=o, lse=lse, workspace=aligned_bytes(max(1, plan.workspace_size)))
        check_against_reference(q, k, v, o, lse)

    # A new plan of the class takes the winner at creation, untimed.
    with fmha_splitk.Plan(**PROBLEM) as again:
        cached = again.info
        assert cached.config_source == fmha_splitk.ConfigSource.TUNING_CACHE
        assert cached.config_index == chosen.index
        assert again.config(cached.config_index).tune_state == fmha_splitk.TuneState.UNTIMED
        o[...] = np.nan
        again.run(q=q, k=k, v=v, o=o, lse=lse)
        check_against_reference(q, k, v, o, lse)
    # Another class (other heads) does not.
    with fmha_splitk.Plan(**dict(PROBLEM, heads_q=8)) as other:
        assert other.info.config_source == fmha_splitk.ConfigSource.HEURISTIC


def test_default_options_and_v_from_positional_arguments(data):
    # Every option at the library's default (3 warm-up and 20 timed runs).
    q, k, v, o, lse = data
    with fmha_splitk.Plan(**PROBLEM) as plan:
        plan.autotune(q, k, v, o)
        assert plan.info.config_source == fmha_splitk.ConfigSource.AUTOTUNE
    ref_o, _ = reference.attention(q, k, v)
    assert relative_error(o, ref_o) < F16_BOUND


def test_cache_false_keeps_the_winner_in_the_plan(data):
    q, k, v, o, lse = data
    with fmha_splitk.Plan(**PROBLEM) as plan:
        plan.autotune(q, k, v, o, lse=lse, cache=False, keep_l2=True, **QUICK)
        assert plan.info.config_source == fmha_splitk.ConfigSource.AUTOTUNE
    assert fmha_splitk.tuning_cache_entries() == 0
    with fmha_splitk.Plan(**PROBLEM) as again:
        assert again.info.config_source == fmha_splitk.ConfigSource.HEURISTIC


def test_save_clear_load_round_trip(data):
    saved = cache_with_one_entry(data)
    assert isinstance(saved, bytes) and saved[:8] == b"FMHATUNE"
    fmha_splitk.tuning_cache_clear()
    assert fmha_splitk.tuning_cache_entries() == 0
    with fmha_splitk.Plan(**PROBLEM) as plan:
        assert plan.info.config_source == fmha_splitk.ConfigSource.HEURISTIC
    fmha_splitk.tuning_cache_load(saved)
    assert fmha_splitk.tuning_cache_entries() == 1
    assert fmha_splitk.tuning_cache_save() == saved
    with fmha_splitk.Plan(**PROBLEM) as plan:
        assert plan.info.config_source == fmha_splitk.ConfigSource.TUNING_CACHE
    # Any bytes-like object; loading again replaces the entry.
    fmha_splitk.tuning_cache_load(bytearray(saved))
    fmha_splitk.tuning_cache_load(memoryview(saved))
    fmha_splitk.tuning_cache_load(np.frombuffer(saved, dtype=np.uint8))
    assert fmha_splitk.tuning_cache_entries() == 1
    # An empty cache round-trips too.
    fmha_splitk.tuning_cache_clear()
    empty = fmha_splitk.tuning_cache_save()
    fmha_splitk.tuning_cache_load(empty)
    assert fmha_splitk.tuning_cache_entries() == 0


def test_corrupt_buffers_raise_with_the_library_message(data):
    saved = cache_with_one_entry(data)
    flipped = bytearray(saved)
    flipped[len(flipped) // 2] ^= 0x10
    with pytest.raises(fmha_splitk.InvalidArgumentError, match="checksum") as caught:
        fmha_splitk.tuning_cache_load(flipped)
    assert caught.value.function == "fmha_tuning_cache_load"
    assert caught.value.message in str(caught.value)
    with pytest.raises(fmha_splitk.InvalidArgumentError, match="FMHATUNE"):
        fmha_splitk.tuning_cache_load(b"\x5a" * len(saved))
    with pytest.raises(fmha_splitk.InvalidArgumentError, match="truncated"):
        fmha_splitk.tuning_cache_load(saved[:3])
    with pytest.raises(fmha_splitk.InvalidArgumentError, match="truncated"):
        fmha_splitk.tuning_cache_load(b"")
    with pytest.raises(TypeError):
        fmha_splitk.tuning_cache_load("FMHATUNE")
    # All or nothing: the cache keeps what it held.
    assert fmha_splitk.tuning_cache_save() == saved


def test_file_round_trip(data, tmp_path):
    saved = cache_with_one_entry(data)
    path = tmp_path / "tuning.bin"
    fmha_splitk.tuning_cache_save_file(path)
    assert path.read_bytes() == saved
    fmha_splitk.tuning_cache_clear()
    fmha_splitk.tuning_cache_load_file(str(path))
    assert fmha_splitk.tuning_cache_save() == saved
    missing = tmp_path / "missing.bin"
    with pytest.raises(fmha_splitk.InvalidArgumentError, match="missing.bin") as caught:
        fmha_splitk.tuning_cache_load_file(missing)
    assert caught.value.function == "fmha_tuning_cache_load_file"
    with pytest.raises(fmha_splitk.InvalidArgumentError, match="no-such-dir"):
        fmha_splitk.tuning_cache_save_file(tmp_path / "no-such-dir" / "tuning.bin")
    with pytest.raises(ValueError, match="null"):
        fmha_splitk.tuning_cache_save_file(str(path) + "\0.other")
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with pytest.raises(fmha_splitk.InvalidArgumentError, match="truncated"):
        fmha_splitk.tuning_cache_load_file(empty)


def test_corrupt_candidate_is_rejected(data, monkeypatch):
    q, k, v, o, lse = data
    with fmha_splitk.Plan(**PROBLEM) as plan:
        assert len(plan.configs()) > 1
        # The library's test hook makes candidate 1's read-back output wrong.
        monkeypatch.setenv("FMHA_SPLITK_TEST_CORRUPT_CANDIDATE", "1")
        chosen = plan.autotune(q, k, v, o, lse=lse, **QUICK)
        wrong = plan.configs()[1]
        assert wrong.tune_state == fmha_splitk.TuneState.REJECTED
        assert wrong.error_ratio > 1 and not wrong.selected
        assert chosen.index != 1 and plan.info.config_index != 1
    check_against_reference(q, k, v, o, lse)


def test_time_budget_skips_all_but_the_heuristic(data):
    q, k, v, o, lse = data
    with fmha_splitk.Plan(**PROBLEM) as plan:
        chosen = plan.autotune(q, k, v, o, lse=lse, max_total_ms=1e-9)
        configs = plan.configs()
        assert configs[0].tune_state == fmha_splitk.TuneState.ACCEPTED
        assert all(c.tune_state == fmha_splitk.TuneState.SKIPPED for c in configs[1:])
        assert chosen.index == 0


def test_bad_options_and_tensors_raise(data):
    q, k, v, o, lse = data
    with fmha_splitk.Plan(**PROBLEM) as plan:
        with pytest.raises(fmha_splitk.InvalidArgumentError, match="options.timed_runs") as caught:
            plan.autotune(q, k, v, o, timed_runs=-1)
        assert caught.value.function == "fmha_splitk_autotune"
        with pytest.raises(fmha_splitk.InvalidArgumentError, match="options.max_total_ms"):
            plan.autotune(q, k, v, o, max_total_ms=float("nan"))
        with pytest.raises(TypeError, match="autotune options"):
            plan.autotune(q, k, v, o, timed_runs=2.5)
        with pytest.raises(fmha_splitk.InvalidArgumentError, match=r"args\.o"):
            plan.autotune(q, k, v, o[:1], **QUICK)
        with pytest.raises(fmha_splitk.InvalidArgumentError, match=r"args\.v"):
            plan.autotune(q, k, o=o, **QUICK)
        # Nothing was tuned.
        assert plan.info.config_source == fmha_splitk.ConfigSource.HEURISTIC
        assert plan.configs()[0].tune_state == fmha_splitk.TuneState.UNTIMED
    assert fmha_splitk.tuning_cache_entries() == 0
    with pytest.raises(ValueError, match="closed"):
        plan.autotune(q, k, v, o)


@pytest.mark.parametrize("fixed", [dict(split_k=4), dict(flags="batch_invariant")], ids=["split_k", "invariant"])
def test_fixed_partition_has_one_config(data, fixed):
    q, k, v, o, lse = data
    with fmha_splitk.Plan(**PROBLEM, **fixed) as plan:
        configs = plan.configs()
        assert len(configs) == 1 and configs[0].waves == -1
        chosen = plan.autotune(q, k, v, o, lse=lse, **QUICK)
        assert chosen.index == 0 and chosen.tune_state == fmha_splitk.TuneState.ACCEPTED
    # Nothing worth caching: the problem fixed the partition.
    assert fmha_splitk.tuning_cache_entries() == 0
    check_against_reference(q, k, v, o, lse)
