"""What each screen's help (?) says: every key and every record it shows."""

TRAINING_HELP = """\
# Training

Trains a run on a thread of its own; this screen shows what it does, live.

## Keys
| key | action |
|---|---|
| `space` | start a run (the next run shown in the summary); pause or resume it. A pause takes effect at the next complete update, so it never changes what is learned. |
| `s` | save a checkpoint now (at the next update boundary) |
| `e` | evaluate now: an extra evaluation row, which never changes the best step |
| `x` | stop the run (it saves first when it has unsaved updates and saving is available) |
| `n` | configure a new run: preset, corpus, updates, precision, seeds, save interval |
| `o` | overlay another run's curves on the plot (from its `metrics.jsonl`) |
| `w` | export this run's metrics to `metrics.csv` in its run directory |
| `v` | below 120 columns, switch between the loss table and the plot (from 120 both show) |
| `p` | show the probes table in place of the loss table (and back); the highlighted probe's probability is drawn on the plot |
| `h` | show the Watch panel in place of the loss table (and back): samples and head roles; the highlighted role's score is drawn on the plot |
| `l` | the plot's y axis: linear or log |
| `m` | the plot's smoothing of per-update curves: off, then a moving average keeping 0.6, 0.9 or 0.97 of the past |
| `y` | the plotted series: loss, learning rate, gradient norm |
| `+` / `-` | zoom the plot to the last N updates (fewer with `+`, more with `-`, back to all) |

## Run summary
- **run**: the run's name (its folder in the runs directory), its preset, and its parameters: the number of learned scalars in how many tensors (the tied token table counts once).
- **precision**: `exact` trains in float64 on one thread with deterministic algorithms, so a paused, saved and resumed run gives bit-for-bit the same records as one never stopped; `fast` uses float32 and several threads.
- **corpus**: where the records come from, how many are in the training and validation splits (for a stream corpus, how many tokens: `stream of N train / M val tokens`, the same for a run followed from another process), and the corpus identity (SHA-256 over every record's split and bytes).
- **tokenizer**: the byte-level BPE tokenizer learned from the training split: merges, vocabulary size (2 specials + 256 bytes + merges) and its identity (SHA-256 of its definition).

## Progress
The state (starting, running, paused, stopping, finished, stopped, failed), a bar of committed updates out of the schedule, the ETA from time spent running (pauses excluded), and the updates per second.

## Loss table
One row per update, newest at the bottom (the table keeps the latest few hundred rows):
- **update**: committed updates after this one (an update skipped for a non-finite gradient keeps the count and is marked *skipped*).
- **batch loss**: mean cross-entropy of this update's batch, in nats per predicted token, before the update was applied.
- **mark**: what sets the row apart: **★ best** on the evaluation with the lowest validation loss so far (the checkpoint `RUN:best` names), **extra** on an evaluation asked for with `e`, **skip** on an update skipped for a non-finite gradient.
- **lr**: the scheduled learning rate of this (1-based) update.
- **grad norm**: global norm of the gradients before clipping.
- **loss scale**: the factor the loss is multiplied by before the backward pass, and the gradients divided by after it, so that small gradients survive low precision (float16); it halves when a gradient overflows and grows back. 1 when scaling is off (the default; `fp16` precision turns it on).
- **tokens/s**: tokens processed per second by this update.

Evaluation rows (**eval N**) hold the mean loss over the whole **train** and **validation** splits after update N. The lowest validation loss on schedule is marked **★ best**; an evaluation asked for with `e` is marked **extra** and never changes the best step.

## Probes
After every scheduled evaluation the run continues each probe's prompt greedily (the bundled probes, or the file given with `--probes`). One row per probe:
- **match**: ✓ when the continuation is exactly the expected text followed by the end of the text.
- **p**: the probability of the expected answer's first token at the first decision (small ones as 4e-3), and its **rank** (1 is the model's top choice).
- **p by evaluation**: that probability at each evaluation so far, a full cell being 1.

## Watch
After every scheduled evaluation the run continues a few prompts (the probes', the file given with `--sample-prompts`, or the first words of your validation records) greedily and by a seeded sample, and scores every attention head. For each role, the head that does it most and its score (0 to 1), with a sparkline of that score by evaluation:
- **induction**: from a repeated token to the token that followed its earlier copy (what an induction head does; its rise is the induction bump);
- **previous token**, **duplicate token** (to the earlier copy of the same token) and **first token** (an attention sink).
Then each prompt with its **greedy** and **sampled** continuation at the latest evaluation. Neither changes the run.

## Plot
Batch loss per update (blue `⠤`, averaged into buckets when there are more points than columns), train loss (orange `•`) and validation loss (green `+`) per evaluation; an overlaid run's curves are named once, under its name (`·` batch, `o` train, `x` val). The legend above the plot names each mark. With the probes table shown, the highlighted probe's probability (red `*`) is drawn against the right axis, 0 to 1; with the Watch panel shown, the highlighted role's top score.

The title says what the plot shows: the series (`y`: loss, learning rate, gradient norm), `log` for a log y axis (`l`), `EMA` and its weight when per-update curves are smoothed (`m`: an exponential moving average, corrected at its start; evaluations are never smoothed), and `last N updates` when zoomed (`+` / `-`). The y axis is marked at round values the same number of rows apart (on a log axis, at round values where they fall).

## Events
The newest line stays in view (also after a resize) unless you scroll up. At launch, the newest run left
before its end (paused, stopped, or ended by a crash) is named with how to continue it: `c`, then `r`.
What a key asked for (pausing, saving, stopping) is noted here rather than in a notification. Started, paused, resumed, saved (with the reason: interval, best, pause, manual, stop), best changed, extra evaluations, the number of matching probes when it changes, the first prompt's greedy sample at each evaluation, the strongest induction head when it changes, refused actions with their reason, finished or stopped with the final state digest, and failures.
"""


CHECKPOINTS_HELP = """\
# Checkpoints

Runs in the runs directory (left) and what one checkpoint or file holds (right). Opening
reads only the headers, so a file of any size opens at once; tensor bytes are read only for
the statistics of one tensor, on a worker thread.

## Keys
| key | action |
|---|---|
| `enter` / click | in the tree: open that run (its latest checkpoint) or checkpoint; in Tensors: statistics of that tensor |
| `o` | open any file or folder by path: a safetensors file from any tool, a checkpoint folder, a run folder; or a run by name: `RUN`, `RUN:best`, `RUN:STEP` |
| `/` | filter the tensor entries (name, dtype, group or file contain the text); `enter` or `down` goes on to the table, where the next `enter` opens the highlighted row; `escape` clears the filter and keeps the row you were on |
| `escape` | in a text field: leave it for the panel's table, so the keys below work again |
| `s` / `S` | in Tensors: sort by the next column / reverse the order (or click a column header) |
| `1`–`8` | show a panel: Tensors, Detail, Aliases, State, Metadata, Integrity, Tokenizer, Compare (the Tokenizer panel takes the keyboard in its field) |
| `b` | below 150 columns: hide the runs panel so the panels take the whole width, or show it again. Leaving the tree with `tab` / `shift+tab`, or filtering with `/`, hides it too; focusing the tree shows it |
| `v` | verify: hash every file against the manifest (reads the files) |
| `p` | generate with this model: the Generation screen opens with it loaded |
| `r` | resume training from this checkpoint, after a preflight list (what is restored, what a weights-only start would reset) |
| `m` | compare with another checkpoint (a path or `RUN:STEP`; the listed ones newest first): changed tensors and differing state records |
| `e` | in the runs tree: rename the run under the cursor |
| `d` | in the runs tree: delete the run under the cursor (asks first) |
| `w` | in the runs tree: write the run's metrics as TensorBoard event files in its folder's `tensorboard/` (needs the tensorboard extra); view them with `tensorboard --logdir` that folder |
| `f5` | read the runs directory again |

## Runs tree
Each run with how its trainer left it (**finished**; **paused**, **stopped** or **ended** — a crash — **at N of M**
updates, in yellow when a checkpoint can continue it: `r`) and its disk use (every file in its folder); beneath it its checkpoints, newest first,
with the reason each was saved (interval, best, pause, manual, stop) and **★ best** on the checkpoint
at the best validation step. *incomplete* marks a folder without a manifest (an interrupted save): it never loads.

## Summary line
The path opened, what kind of thing it is (checkpoint folder; portable model file; training-state file;
a safetensors file made by another tool; a PyTorch pickle or nanoGPT `ckpt.pt`; a transformers model folder),
and per file its size, header size and number of tensors; a folder of more than two files (shards) starts with
their totals and scrolls: while it is taller than its box, Tab reaches it and the arrow keys scroll it. A file from another tool says so: browse, statistics and compare work on it, and
`r` and `p` say why it does not resume or generate here and whether `minigpt-tui convert` makes a model of it.
A checkpoint deleted since it was opened (a run keeps only its newest checkpoints and its best, so resuming
from an older one removes it once newer ones are saved) is never shown as open: its run's newest checkpoint
opens instead, with a line saying so.

## Tensors
One row per tensor entry in the file headers: **name**; **dtype** (F64, F32, BF16, U64, U32, U8…);
**shape** ([] is a scalar); **elements** (product of the shape); **bytes** (elements × dtype size);
**offsets**, the entry's begin–end byte range within the file's data section (after the 8-byte length and the JSON header);
**group**, what the entry is for (learned, constants, tokenizer; in a training state: optimizer, schedule,
data_progress, randomness, loss_scaling, accumulation, update_policy, evaluation); **file** (its name without `.safetensors`), when a folder holds two files. A name too long for its
column keeps its end behind `…` (the layer number and the moment are at the end); Detail shows it whole.

## Detail
The chosen tensor's header record, then statistics computed from its bytes: min, max, mean, population standard
deviation, fraction of exact zeros, NaN and infinity counts, and a histogram of the finite values in 20 equal-width bins.

## Aliases
Names that are not stored because they are another entry: a tied model stores its token table once, and
`head.weight` is recorded as the transpose of `token_embedding.weight`. **name** is the absent entry, **target**
the stored one, **transform** how to get one from the other, **use** where the model uses it.

## State
Records grouped by meaning, each group with a line saying what it is for: identities (SHA-256 of model, tokenizer,
config, corpus), composition, model config, constants, tokenizer, special ids, parameters, provenance; and in a
training state everything that decides the next update: schedule, optimizer, data position, random streams,
loss scaling, accumulation, update policy, evaluation curve, the environment envelope, and whether bit-for-bit
continuation is still promised.

## Metadata
The raw string-to-string metadata map of each file's header, exactly as stored (our records are JSON strings).

## Integrity
For a checkpoint folder, the manifest's result: whether it is complete (a manifest, written last, is present),
each file's recorded size and SHA-256, whether the file is present and its size matches, and, after `v`, whether
its SHA-256 matches. A single file has no manifest.

## Tokenizer
The byte-level BPE tokenizer saved in a model file: ids 0 and 1 are BOS and EOS, 2–257 the 256 bytes, and one id per
merge from 258 in rank order. Each merge row shows its **rank**, the new **id**, the **left** and **right** ids it joins
(with their pieces) and the merged **piece**. The field takes the keyboard when the panel opens: type to see the pieces and ids of any text
(spaces show as ·, newlines as ↵); `escape` leaves it.

## Compare
Against another checkpoint: each tensor's status (same bytes, changed, reshaped, or only in one of the two) with
**max |a−b|**, the largest absolute difference; **‖a−b‖/‖a‖**, the change relative to the tensor's size (0.01 is a 1 %
nudge, whatever the scale of the weights); and the norms **‖a‖** and **‖b‖** of the two sides (– where a side has no
such tensor); then every state record whose value differs.
"""


# -- worker results ---------------------------------------------------------------------------


GENERATION_HELP = """\
# Generation

Steps through generation one next-token decision at a time. Each decision is one forward pass
(on a worker thread), one distribution over the vocabulary, and one chosen id. The pass reads
the key/value cache and computes only the new position (`kv cache` under the prefix), or
recomputes the whole prefix (`whole prefix`: the default in exact precision, float64, whose
bits it keeps); `k` switches and redoes the decisions made.

## Keys
| key | action |
|---|---|
| `enter` | in the model field: load the model; in any other field: apply the settings and start over |
| `n` | take one decision |
| `r` | run: decide until a stop (EOS or the budget), the decisions showing as they come; `r` again stops it after the decision in progress |
| `backspace` | step back one decision (the sampling generator is restored, so `n` redoes it exactly) |
| `ctrl+r` | reset to the prompt (apply changed settings) |
| `f` | force another id at the selected decision instead of the rule's choice: enter on its empty field takes the highlighted candidate; type any id, or a piece as the screen shows it (`·the`) or in double quotes (`" the"`); later decisions are undone and you continue from there |
| `w` | save the trace (JSON: model, rule, prompt ids, every decision with logits and probabilities, output) |
| `v` | below 34 rows, switch between the candidates and the attention view (a taller terminal shows both) |
| `u` | the rule: greedy (the most probable id each time) or sample (temperature, top-k, top-p and seed in the form); the next decision starts over with it |
| `l` | logit lens of the selected decision, in place of the candidates (again: back) |
| `x` | contributions to the selected decision's logit (and to the highlighted candidate's) |
| `h` | one head's whole attention pattern over the prefix; `[` `]` change the block, `{` `}` the head |
| `j` | go to a typed block and head (`23.4`, `23 4`, `L23 H4` or `block 23 head 4`) in the head view |
| `b` | order of the parts (`x`) and of the attention's heads: largest first (the default) or the model's order |
| `k` | decide with the key/value cache or recompute the whole prefix (the decisions made are redone) |
| `o` | in the head view: the next role in the grid of every head's role score (induction, previous-token, duplicate-token, first-token; the shown head bracketed) |
| `m` | compare every decision with a second model (same tokenizer; `none` removes it) |
| `p` | activation patching of the selected decision: a corrupt prompt of the same token length, answers A and B (the chosen id and the runner-up); the sweep runs on the worker, then a layer x position grid of *restored* (`c` cycles resid / attn / mlp, `h` or `enter` a layer's heads, `escape` closes) |
| `s` | score a text (the prompt and continuation on screen, or a text file) in the Text view: each token coloured by its loss, the selected token's alternatives |
| `e` | steering: a steering file (`generate --save-steering`) and a coefficient; the prompt is generated under the form's rule without and with it, each step's chosen id, piece and probability side by side |
| `tab` / `shift+tab` | move through the form (model, prompt, rule, sampling settings, budget) and the tables; the prompt keeps its text when you tab into it |
| `escape` | leave the form for the candidate table |

## Form
- **model**: a checkpoint folder, a `model.safetensors` file, or `RUN:latest` / `RUN:best` / `RUN:STEP` for a run in the runs directory.
- **prompt**: encoded with the model's own tokenizer, BOS first, no EOS.
- **rule**: *greedy* takes the highest eligible logit (a tie goes to the smaller id). *sample* divides the logits by the **temp**erature, keeps the **top-k** highest, then the smallest set whose probability reaches **top-p**, renormalizes, and draws with its own generator seeded by **seed** (one draw per decision, so a forced decision does not shift later draws). Blank top-k / top-p means no cut.
- **budget**: the most new ids to generate.

## Prefix
The ids the model sees next, as pieces: the prompt, then the generated pieces in bold; a forced piece is reversed.
Spaces show as ·, newlines as ↵. The count is prefix length against the model's context.

## Decisions
One row per decision: its number (with `*` when you forced it), the chosen piece (reversed when forced) and its
selection probability **p** (under 0.005 as 4e-3). The highlighted row is the decision shown on the right; move it to look back.
With a second model (`m`): **pB**, the chosen id's probability under the second model reading the same prefix (bold when
the two models' top choices differ), and **KL**, KL(A||B) of the two distributions in nats (0: they agree exactly);
the second model's name is under the list (**B:**).

## Inside a decision
Computed on the worker from one extra forward pass over the decision's prefix.
Places are named alike here and on the command line: **embed** (the embeddings), **block N resid** (the residual
stream after block N), **block N attn** / **block N mlp** (its attention and feed-forward outputs), **block N head H**
(head H of block N; blocks and heads are counted from 0).
- **Lens** (`l`): for each stream (embed, then each block N resid) the last position passed through the final norm
  and the head: the chosen id's **rank** and **p** there and the top ids (the chosen one highlighted); the sparkline shows
  its rank by layer (a full cell is rank 1). The last row is exactly the model's own distribution.
- **Parts** (`x`): the chosen logit split into the embedding, each head, each block's feed-forward part and (gpt2)
  the attention output and final norm biases, as signed bars on the scale of the largest part; the largest
  |contribution| first, whatever its sign (`b`: the order they enter the residual stream). The final norm's scale is
  taken at the final residual, so the parts (summed in float64) add up to the logit; for a float32 model, whose own
  logit is rounded to float32, the line says when the two agree to that rounding.
- **Head** (`h`): the whole attention pattern of one head, a row per query position and a column per key position;
  a cell's height is its weight relative to the row's largest, bold from 0.5, dim under 0.1. It scrolls. Every head's
  rows are recorded as the decisions are made (the prompt's in the first pass, then the one row each decision adds),
  so moving between heads reads them without a forward pass.

## Decision line
The chosen piece and id; the rule's own pick when you forced another; **entropy** of the raw distribution in nats
(0: certain; ln V: uniform); how many ids the rule **retained** out of the **eligible** ones (BOS is never eligible);
the uniform **draw** in [0, 1) under sampling.

## Candidates
The top ids of the selected decision by logit, plus the chosen id and the rule's pick if they rank lower,
and the ineligible ids (BOS, which is never chosen) wherever they rank. Probabilities from 0.005 up have four
decimals (0.4778); under 0.005 an exponent (4.2e-3); exactly zero is 0.
- **rank**: 1-based by logit, ties by smaller id.
- **logit**: the model's score for the last position.
- **raw p**: softmax of all logits (the model's own distribution), with a bar scaled to the most probable candidate (it shows even when every probability is small).
- **sel p**: the probability the rule selected from: zero outside the retained set (ineligible, cut by top-k or top-p); under greedy, the eligible softmax.
- **elig**: ✓ when the rule may draw the id, *cut* when it is eligible but outside the top-k / top-p the rule keeps, ✗ when it may never be chosen (BOS, forbidden ids).
- **▶** before the rank marks the chosen id (bold; forced ones are also named in the decision line), **◇** the rule's own pick when another id was forced.

## Attention
For the selected decision, each head's attention weights from the last position over the prefix, one cell per
position: the cell's height is the weight relative to the row's largest, bold from 0.5 and dim under 0.1 (each row
sums to 1); the axis above shows each position's first character (^ is BOS), and each row ends with its largest
weight past the first position and where it falls. The sharpest heads come first, by that weight (many heads park
the weight they do not use on the first position, an attention sink, so a weight there says little); `b` lists
every head in the model's order.

## Output
While deciding: how many decisions of the budget. At the end: the **stop** reason (eos: the model chose EOS;
budget: the budget is spent), the generated **bytes** (EOS excluded), whether they are valid **UTF-8**, and
the text (invalid bytes shown as �). Past the model's context a decision sees only the last context positions
(a sliding window, recomputed whole): the prefix shows that window, the output line says `window from #K`, and
a decision that slid says which positions it saw.
"""

TEXT_VIEW_HELP = """\
# Text view

A text scored by the Generation screen's model as `minigpt-tui score` scores it (on the worker): encoded as a
prompt is (BOS first), every id after the first gets its loss −log p in nats, its probability and its rank; a
text longer than the context is read in overlapping windows, each id scored once.

## Keys
| key | action |
|---|---|
| `←` `→` | the previous or next token |
| `↑` `↓` / `pageup` `pagedown` | the token a line (a page) above or below |
| `home` / `end` | the first or last scored token |
| `d` | colour by the change between the two models (B's loss minus A's; a second model set with `m`), again: by loss |
| `escape` | back to the Generation screen |

## Text
Each scored token's background is its loss on a scale from 0 (green) to ln V nats (red; the loss of a uniform guess
over the V ids, and anything above it). With `d`: blue where the second model B predicts the token better, red where
worse, grey where they agree, scaled to the largest change. The text colour alternates from token to token, so
neighbours of one colour still read apart. The first id (BOS) is not scored and stays plain. A newline shows as ↵. The line above gives the tokens scored, the windows, the **mean loss** and the perplexity.

## Selected token
Its piece and id, **loss** (nats), **p** (its probability), **rank** over the vocabulary (logit descending, ties by
smaller id), and the five ids the model found likeliest there, with their probabilities (the token itself
highlighted). With `d`: B's loss and the change.
"""
