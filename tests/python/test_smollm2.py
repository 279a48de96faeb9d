"""SmolLM2-135M-Instruct through kvcache: every layer's K/V in the cache, attention by kvcache.
Skips, saying why, when the model file cannot be had (it comes from PyPI, checked by hash)."""

import numpy as np
import pytest

import kvcache

PROMPT = ("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
          "<|im_start|>assistant\n")
TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good "
        "fortune, must be in want of a wife. However little known the feelings or views of such "
        "a man may be on his first entering a neighbourhood, this truth is so well fixed")


@pytest.fixture(scope="module")
def smollm2():
    from kvcache_lab.models import fetch, gguf_llama, llama
    try:
        path = fetch.smollm2_gguf()
    except fetch.ModelUnavailable as e:
        pytest.skip(f"SmolLM2 is not available here: {e}")
    return llama.Model(gguf_llama.load(path), rowwise=True), gguf_llama.tokenizer(path)


def new_cache(model, **sections):
    sections.setdefault("cache", {"capacity": "256MiB"})
    return kvcache.Cache(**model.cache_config(**sections))


def decode_each(model, cache, ids):
    seq = cache.add_sequence()
    return seq, np.concatenate([model.step(cache, [seq], [[t]])[0] for t in ids])


def prefill_chunks(model, cache, ids, chunk):
    seq = cache.add_sequence()
    return seq, model.logits(model.prefill_hidden(cache, seq, ids, chunk))


def test_greedy_chat_completion(smollm2):
    model, tok = smollm2
    out = model.generate(new_cache(model), tok.encode(PROMPT).ids, 20, stop=model.c.eos)
    answer = tok.decode(out)
    print("SmolLM2:", answer)
    assert "Paris" in answer


def test_decode_through_fp32_equals_a_dense_recompute(smollm2):
    model, tok = smollm2
    ids = tok.encode(TEXT).ids[:32]
    _, logits = decode_each(model, new_cache(model, format={"k": "fp32", "v": "fp32"}), ids)
    gap = np.abs(logits - model.dense_logits(ids)).max()
    print(f"fp32 decode vs dense float64 attention: max |logit gap| {gap:.2e}")
    assert gap <= 1e-4


# Chunked prefill against token-by-token decode. With cpu-tbb's batch_invariant attention, a
# query's sums go in an order of its own whatever the batch or the chunk (docs/backends/cpu-tbb.md),
# and the model's projections run row by row (rowwise), so every format whose codes a token owns
# alone gives the same logits bit for bit. kivi-k groups tokens: until its group fills, decode
# reads a token's fp16 residual, a chunk that fills the group reads its codes; its gap is the
# format's rounding, reported with the greedy agreement. Without the option, prefill goes in
# query tiles and decode splits keys by the threads: fp32 differs by about 6e-7 a layer, 5e-5 on
# the logits after 30 layers, and a quantized format turns such last bits into other codes.
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16", "fp8-e4m3", "int8-per-token",
                                 "int4-group", "kivi-k"])
def test_chunked_prefill_against_decode(smollm2, fmt):
    model, tok = smollm2
    ids = tok.encode(TEXT).ids[:48]
    spec = {"name": fmt, "group": 16} if fmt == "kivi-k" else fmt  # a group within a page
    cache = new_cache(model, format={"k": spec, "v": spec},
                      backend=[{"name": "cpu-tbb", "batch_invariant": True}])
    _, one_by_one = decode_each(model, cache, ids)
    _, chunked = prefill_chunks(model, cache, ids, 16)
    gap = np.abs(one_by_one - chunked).max()
    agree = np.mean(one_by_one.argmax(axis=1) == chunked.argmax(axis=1))
    print(f"{fmt}: chunked prefill vs token-by-token decode: max |logit gap| {gap:.2e}, "
          f"greedy agreement {agree:.3f}")
    if fmt == "kivi-k":
        assert agree >= 0.7
    else:
        assert gap <= 1e-5


def test_a_batch_equals_its_sequences_alone(smollm2):
    model, tok = smollm2
    a, b = tok.encode(TEXT).ids[:20], tok.encode(PROMPT).ids[:13]
    cache = new_cache(model)
    sa, sb = cache.add_sequence(), cache.add_sequence()
    together, _ = model.step(cache, [sa, sb], [a, b])
    alone = np.concatenate([model.step(cache, [cache.add_sequence()], [t])[0] for t in (a, b)])
    np.testing.assert_allclose(together, alone, atol=1e-4)
    next_together, _ = model.step(cache, [sa, sb], [[a[0]], [b[0]]])  # then a decode of both
    assert next_together.shape == (2, model.c.vocab)


def test_fork_and_prefix_match_equal_recomputation(smollm2):
    model, tok = smollm2
    ids = tok.encode(TEXT).ids[:40]
    cache = new_cache(model)
    seq, _ = prefill_chunks(model, cache, ids[:32], 32)
    cache.publish_prefix(seq, np.asarray(ids[:32], np.int32))
    child = cache.fork(seq)
    reused = cache.add_sequence()
    assert cache.match_prefix(reused, np.asarray(ids[:32], np.int32)) == 32
    fresh = cache.add_sequence()
    want, _ = model.step(cache, [fresh], [ids])
    for other in (child, reused):
        got, _ = model.step(cache, [other], [ids[32:]])
        np.testing.assert_allclose(got, want[32:], atol=1e-4)


def test_streaming_eviction_equals_the_same_mask_without_eviction(smollm2):
    model, tok = smollm2
    ids = (tok.encode(TEXT).ids * 2)[:72]
    mask = {"name": "sink-window", "sinks": 4, "window": 16}
    kept = new_cache(model, mask=mask)
    evicting = new_cache(model, mask=mask, eviction={"name": "streaming", "sinks": 4,
                                                      "window": 16})
    _, want = decode_each(model, kept, ids)
    seq = evicting.add_sequence()
    got, peak = [], 0
    for t in ids:
        logits, _ = model.step(evicting, [seq], [[t]])
        got.append(logits)
        peak = max(peak, evicting.stats()["used_pages"])
    np.testing.assert_allclose(np.concatenate(got), want, atol=1e-4)
    assert evicting.length(seq) <= 4 + 16 + 16 and peak <= 3  # bounded: sinks + window + a page


@pytest.mark.parametrize("local, most", [
    ({"name": "sliding-window", "window": 32}, 32 + 16),             # the window and its page
    ({"name": "sink-window", "sinks": 4, "window": 16}, 16 + 16 + 16),  # and the sinks' page
])
def test_a_hybrid_cache_equals_the_dense_recompute_under_each_layers_mask(smollm2, local, most):
    """SmolLM2 with a Gemma-3-like pattern imposed: five windowed layers to one global, fp32, a
    prefill of 20 then token by token. The logits equal a dense recompute in which each layer
    sees its own mask; the windowed layers hold only their window's pages (and the sinks').
    (A window of 16 without sinks drops SmolLM2's attention sink, and its activations grow
    until float32's rounding, not the cache, moves logits by 1e-3.)"""
    from kvcache_lab.models import llama
    model, tok = smollm2
    ids = (tok.encode(TEXT).ids * 2)[:72]
    layers = {"groups": {"local": {"mask": local}, "global": {}},
              "pattern": ["local x5", "global"], "context": 128}
    cache = new_cache(model, format={"k": "fp32", "v": "fp32"}, layers=layers,
                      cache={"capacity": "64MiB", "prefix_caching": False})
    seq, first = prefill_chunks(model, cache, ids[:20], 20)
    rest = [model.step(cache, [seq], [[t]])[0] for t in ids[20:]]
    got = np.concatenate([first] + rest)
    want = model.dense_logits(ids, llama.visible_per_layer(cache))
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert np.abs(model.dense_logits(ids) - want).max() > 1.0  # the masks matter here
    assert cache.length(seq, layer=5) == len(ids)
    assert cache.length(seq, layer=0) <= most
    assert cache.stats(layer=0)["used_pages"] <= most // 16


def test_cache_positions_equal_streamingllms_recompute(smollm2):
    """4 sinks + a window of 16 at positions within the cache, with streaming eviction, decoded
    token by token through fp32: the logits equal a dense recompute in which every query sees its
    keys rotated at their ranks (StreamingLLM); at the original positions they do not."""
    model, tok = smollm2
    ids = (tok.encode(TEXT).ids * 2)[:48]
    sinks, window = 4, 16
    visible = lambda t: np.union1d(np.arange(min(sinks, t + 1)),
                                   np.arange(max(0, t - window + 1), t + 1))
    want = model.dense_logits(ids, visible, cache_positions=True)
    fp32 = {"k": "fp32", "v": "fp32"}
    mask = {"name": "sink-window", "sinks": sinks, "window": window, "positions": "cache"}
    streaming = {"name": "streaming", "sinks": sinks, "window": window}
    _, got = decode_each(model, new_cache(model, format=fp32, mask=mask, eviction=streaming), ids)
    gap = np.abs(got - want).max()
    _, original = decode_each(model, new_cache(model, format=fp32,
                                               mask=dict(mask, positions="original")), ids)
    drift = np.abs(original - want).max()
    print(f"cache positions vs StreamingLLM's recompute: {gap:.2e}; original positions: "
          f"{drift:.2e}")
    assert gap <= 1e-4
    assert drift > 1e-2
    np.testing.assert_array_equal(original[:sinks + window], got[:sinks + window])


def test_the_accuracy_experiment_in_small(smollm2):
    """python -m kvcache_lab.eval --smoke --ctx 512: two chunks of Pride and Prejudice, fp32, fp16,
    int8 and int4; the figures must be sane as the field reports them (fp16 free, int8 under 1%,
    loss growing as bits shrink)."""
    from kvcache_lab.eval import formats as experiment
    from kvcache_lab.models.fetch import ModelUnavailable
    formats = [f for f in experiment.FORMATS if f[0] in experiment.SMOKE]
    try:
        rows = {r["format"]: r for r in experiment.run(formats, 2, 512, 256, False, None)}
    except ModelUnavailable as e:
        pytest.skip(f"the text is not available here: {e}")
    assert rows["fp32"]["tokens_scored"] == 2 * 255
    assert rows["fp32"]["perplexity"] < 100
    assert abs(rows["fp16"]["delta_pct"]) < 0.5 and rows["fp16"]["top1_agreement"] >= 0.995
    assert rows["int8-per-token"]["delta_pct"] < 1.0
    assert rows["int4-group 32"]["delta_pct"] > rows["int8-per-token"]["delta_pct"]
    assert rows["int4-group 32"]["bytes_per_token"] < rows["int8-per-token"]["bytes_per_token"]


def test_the_streaming_control_scores_every_later_copy_alike(smollm2):
    """python -m kvcache_lab.eval --streaming --text repeat, in small: one passage of 128 tokens three
    times, 4 sinks + a window of 28 at positions within the cache. The second and third copies
    see the same inputs (the sinks, the window and, through the layers, the previous copy's
    tail) at the same cache positions, so their buckets score alike (only the rotations' rounding
    differs) although the third sits 128 positions farther; memory stays constant."""
    from kvcache_lab.eval import streaming
    from kvcache_lab.models.fetch import ModelUnavailable
    name = "4 sinks + 28, cache positions"
    try:
        (row,) = streaming.run(3 * 128, 128, 4, 32, 32, 32, None, only={name}, text="repeat")
    except ModelUnavailable as e:
        pytest.skip(f"the text is not available here: {e}")
    buckets = row["bucket_perplexity"]
    assert len(buckets) == 12
    assert buckets[8:] == pytest.approx(buckets[4:8], rel=1e-3)
    assert buckets[4:8] != pytest.approx(buckets[:4], rel=1e-3)  # the first copy started cold
    assert row["peak_pages"] <= 6  # the window and a step's 32 new tokens, of 24 pages streamed
    low, high = row["same_bucket_vs_first_span_pct"]
    assert low < high


def test_kvcache_evaluate_ranks_the_models_own_kv(smollm2, tmp_path):
    """K/V dumped from the model (one layer, 256 tokens) through `kvcache evaluate`: it reads
    them and ranks fp16 first and int4-group last among the formats both rank."""
    import json
    import os
    import subprocess
    from kvcache_lab.models import dump_kv
    tool = os.environ.get("KVCACHE_TOOL")
    if not tool:
        pytest.skip("KVCACHE_TOOL (the kvcache tool's path) is not set; ctest sets it")
    model, tok = smollm2
    (file,) = dump_kv.dump(tmp_path, [14], 256, model, tok)
    done = subprocess.run([tool, "evaluate", "--kv", str(file), "--json"], capture_output=True,
                          text=True, check=True)
    ranking = [r["format"] for r in json.loads(done.stdout)["ranking"]]
    assert ranking[0] == "fp16" and ranking.index("int4-group") > ranking.index("int8-per-token")


def test_the_tokenizer_round_trips_the_corpus(smollm2):
    """Every novel of the corpus encodes and decodes back to itself; digits are split one by
    one (SmolLM's pre-tokenizer) and no BOS is added."""
    from kvcache_lab.models import austen
    from kvcache_lab.models.fetch import ModelUnavailable
    _, tok = smollm2
    try:
        books = [austen.book(b) for b in austen.BOOKS]
    except ModelUnavailable as e:
        pytest.skip(f"the text is not available here: {e}")
    for text in books:
        assert tok.decode(tok.encode(text).ids, skip_special_tokens=False) == text
    assert len(tok.encode("2024").ids) == 4
    assert tok.encode("a").ids[0] != smollm2[0].c.bos
