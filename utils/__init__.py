"""`utils`: the library the book grows, one module per concept, in reading order.

Each notebook derives a piece and the finished piece lives here, so later notebooks import
it instead of retyping it. Imports only point backwards in the reading order:

- `env`          reproducible set-up (`setup`, `get_device`, `fmt`)    -- notebook 00
- `checks`       argument checks shared by every module (one wording per mistake)
- `checkpoint`   one format to save and load every model: config.json + safetensors weights
- `vocab`        the special token ids and the word-level vocabulary   -- notebook 01
- `plotting`     heatmaps of attention, masks and positional encodings -- every notebook
- `diagrams`     the architecture figure drawn with matplotlib         -- notebook 00
- `embeddings`   token embeddings, positional encodings                -- notebooks 01-02
- `cache`        the key/value cache that attention fills when decoding -- notebook 11
- `attention`    scaled dot-product and multi-head attention           -- notebooks 03, 05
- `masks`        padding and causal masks                              -- notebook 04
- `layers`       feed-forward, LayerNorm, sublayers, encoder/decoder layers -- notebooks 06-08
- `fast`         the fast path: the same modules in fewer kernels (training) -- notebooks 10-14
- `model`        encoder, decoder, the Transformer and its config      -- notebook 09
- `parity`       copy our weights into torch.nn modules, for parity checks -- notebooks 04-09
- `data`         padding, shifted decoder input, length buckets, synthetic tasks -- notebook 10
- `training`     label smoothing, warm-up schedule, the training loop  -- notebook 10
- `parallel`     several small training runs at once, one per CPU core -- notebooks 10, 13
- `stats`        exact binomial bounds and tests, bootstraps, BLEU intervals -- notebooks 10-13
- `distributed`  data parallelism: process group, bucketed sampler, token-mean loss -- notebook 14
- `decoding`     greedy search, beam search, sampling (batched, key/value cache) -- notebook 11
- `corpora`      the Bible and Shakespeare texts shipped under data/   -- notebooks 12-13
- `bpe`          joint BPE tokenizer with the book's special ids       -- notebook 12
- `translation`  the trained translator saved and loaded (weights, BPE, scores) -- notebook 12
- `chars`        character vocabulary for the Shakespeare model        -- notebook 13
- `gpt`          a decoder-only model from the same blocks and cache   -- notebook 13
- `measure`      fair timings and memory peaks                         -- notebook 14
- `flash`        attention in tiles with the online softmax (FlashAttention) -- notebook 14
- `gpt2`         the book's GPT to and from Hugging Face's GPT-2 (configs, weights) -- notebook 15
- `modern`       RMSNorm, RoPE, SwiGLU, grouped-query attention: a Llama-style LM -- notebook 16
- `llama`        Hugging Face's LlamaForCausalLM weights in the book's ModernLM -- notebook 16
- `bert`         BERT: masked LM, fine-tuning, HF's BertModel -- notebook 17 (being written)
- `vit`          the Vision Transformer, the 8×8 digits, baselines, attention rollout -- notebook 18

Conventions: batch first, `(batch, seq, d_model)`; heads as `(batch, heads, seq, d_head)`;
masks are boolean with `True` = may attend, broadcastable to `(batch, heads, queries, keys)`;
bad input raises `ValueError` saying what was expected and what came.
"""

from utils.env import fmt, get_device, setup

__all__ = ["setup", "get_device", "fmt"]
