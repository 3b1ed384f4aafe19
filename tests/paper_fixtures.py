"""Derive small fixtures from the paper's public repository (Kesav2k04/ugaa-research), with their provenance.

    python tests/paper_fixtures.py PATH/TO/ugaa-research [--commit HASH] [--only gap attention] [--note TEXT] [--out DIR]

PATH is a local copy of the repository: a clone (`git clone https://github.com/Kesav2k04/ugaa-research`), the mirror
path the search tool's `fetch` returns, or a folder holding the same paths (then give the commit it was taken at,
and say in --note how the copy was made). Each deriver reads the files it names, checks every record against the
file's own summary and against POPE's question files (each question's image and label, by question id: COCO POPE
from the shared folder, the package cache or its repository at a pinned commit), and writes a small CSV plus an
entry in provenance.json (repository, commit, source path and sha256, columns, what was checked, the note). Nothing
is written unless every deriver asked for succeeds; a file that fails a check is named in one line, exit 2.

The output goes to the package's assets (pope_audit/assets/paper/, read by `pope_audit.foundation.paper.paper_records` and
`paper_attention`), because chapters read it and must run on an installed copy; the tests read it from there too.
The repository's files are never copied into this one: only the columns a chapter needs, derived.

Derivers:
  gap        experiments/pope_{split}_2tok_vs_8tok.json, three splits -> gap_{split}.csv:
             question_id, image, label, two_token, eight_token (the paper's per-question two- and eight-token answers)
  attention  experiments/ugaa_full_adversarial_3000q_diagnostic.json -> attention_adversarial.csv:
             question_id, image, label, prediction, yes_raw, no_raw, grounding, clip_l_max_sim
             (the attention diagnostic behind the paper's d = -0.46)
"""
import argparse, csv, hashlib, io, json, math, subprocess, sys
from collections import Counter
from pathlib import Path

REPO = 'Kesav2k04/ugaa-research'
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT/'pope_audit/assets/paper'
SPLITS = ('adversarial', 'popular', 'random')
GREEDY = {3869: 'yes', 1939: 'no'}      # LLaVA-1.5's "Yes" and "No" (in tokens.LLAVA_EIGHT): the eight-token answer is the greedy one


class Bad(Exception):
    "A source file that fails a check: the one line printed before exit 2."


def commit_of(src:Path, given:str|None) -> str:
    "The commit of a clone or mirror (git), else the one given."
    for args in (['git', '-C', str(src), 'rev-parse', 'HEAD'], ['git', '--git-dir', str(src), 'rev-parse', 'HEAD']):
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode == 0: return r.stdout.strip()
    if not given: raise Bad(f'{src}: not a git clone: give the commit the copy was taken at (--commit)')
    return given


def read_source(src:Path, rel:str, commit:str) -> tuple[bytes, dict]:
    "A JSON file of the copy (work tree, else a bare mirror at `commit`): its bytes and its parsed content."
    p = src/rel
    if p.is_file(): raw = p.read_bytes()
    else:
        r = subprocess.run(['git', '--git-dir', str(src), 'show', f'{commit}:{rel}'], capture_output=True)
        if r.returncode: raise Bad(f'{src/rel}: not in the copy')
        raw = r.stdout
    try: return raw, json.loads(raw)
    except json.JSONDecodeError as e: raise Bad(f'{rel}:{e.lineno}: not JSON ({e.msg})')


def pope_questions() -> dict:
    "split -> {question id: (image, label)} from COCO POPE's own files (shared, cached, or downloaded at the pinned commit)."
    sys.path.insert(0, str(ROOT))
    from pope_audit.benchmarks.relabel import find_files, POPE_COCO
    from pope_audit.foundation.data import read_pope_files
    q = read_pope_files([find_files(POPE_COCO)])
    return {s: {int(i): (im, l) for i, im, l in zip(g.question_id, g.image, g.label)} for s, g in q.groupby('split')}, POPE_COCO.name


def _need(rel, i, r, keys):
    for k in keys:
        if k not in r: raise Bad(f"{rel}: record {i}: field '{k}': missing")


def _join_pope(rel, records, pope, split, id_key='question_id'):
    "Each record's question id (int), image and label; every question of the split present once, labels as POPE's."
    ids = []
    for i, r in enumerate(records):
        q = int(r[id_key])
        if q not in pope[split]: raise Bad(f"{rel}: record {i}: field '{id_key}': question {q} is not in POPE {split}")
        if r['label'] != pope[split][q][1]: raise Bad(f"{rel}: record {i}: field 'label': {r['label']!r}, POPE {split} says {pope[split][q][1]!r}")
        ids.append(q)
    if (dup := [q for q, n in Counter(ids).items() if n > 1]): raise Bad(f"{rel}: field '{id_key}': question {dup[0]} appears twice")
    if len(ids) != len(pope[split]): raise Bad(f'{rel}: {len(ids)} of POPE {split}\'s {len(pope[split])} questions (a partial copy?)')
    return [(q, *pope[split][q]) for q in ids]


def f1_of(preds, labels):
    tp = sum(p == 'yes' and l == 'yes' for p, l in zip(preds, labels))
    return 2 * tp / (sum(p == 'yes' for p in preds) + sum(l == 'yes' for l in labels))


def derive_gap(src, commit, pope):
    "The paper's per-question two- and eight-token answers, one CSV per split."
    for split in SPLITS:
        rel = f'experiments/pope_{split}_2tok_vs_8tok.json'
        raw, d = read_source(src, rel, commit)
        if not isinstance(d, dict) or 'results' not in d or 'summary' not in d: raise Bad(f"{rel}: field 'results': missing (not the paper's layout)")
        res, summ = d['results'], d['summary']
        for i, r in enumerate(res):
            _need(rel, i, r, ['question_id', 'label', 'pred_2tok', 'pred_8tok', 'top_token_id'])
            for k in ('pred_2tok', 'pred_8tok'):
                if r[k] not in ('yes', 'no'): raise Bad(f"{rel}: record {i}: field '{k}': {r[k]!r} is not yes or no")
            if GREEDY.get(r['top_token_id']) != r['pred_8tok']: raise Bad(f"{rel}: record {i}: field 'pred_8tok': not the greedy token {r['top_token_id']}")
        keys = _join_pope(rel, res, pope, split)
        if summ.get('n') != len(res): raise Bad(f"{rel}: field 'summary.n': {summ.get('n')}, the file holds {len(res)} results")
        labels = [r['label'] for r in res]
        f1 = {}
        for k, col in (('eval_2token', 'pred_2tok'), ('eval_8token', 'pred_8tok')):
            preds = [r[col] for r in res]
            n_yes, f1[col] = sum(p == 'yes' for p in preds), f1_of(preds, labels)
            if n_yes != summ[k]['yes_predictions'] or round(f1[col], 4) != summ[k]['f1']:
                raise Bad(f"{rel}: field 'summary.{k}': {col} gives {n_yes} yes and F1 {f1[col]:.4f}, the summary {summ[k]['yes_predictions']} and {summ[k]['f1']}")
        top = Counter(str(r['top_token_id']) for r in res)
        if top != Counter(summ['top_tokens_generated']): raise Bad(f"{rel}: field 'summary.top_tokens_generated': {dict(top)} in the records")
        rounded_gap = round(round(f1['pred_8tok'], 4) - round(f1['pred_2tok'], 4), 4)
        if rounded_gap != summ['f1_gap_8tok_minus_2tok']: raise Bad(f"{rel}: field 'summary.f1_gap_8tok_minus_2tok': the records give {rounded_gap}")
        rows = [dict(question_id=q, image=img, label=lab, two_token=r['pred_2tok'], eight_token=r['pred_8tok']) for (q, img, lab), r in zip(keys, res)]
        yield f'gap_{split}.csv', rows, dict(
            source=rel, source_sha256=hashlib.sha256(raw).hexdigest(), summary=summ,
            columns=dict(question_id="POPE's question id (the file's question_id; a string in some of the paper's files)",
                         image="the question's image, from POPE's question file by question id", label="the file's label (equal to POPE's)",
                         two_token="the file's pred_2tok: yes/no from logits of ids 3582 vs 1217", eight_token="the file's pred_8tok: yes/no, the greedy token (3869 Yes / 1939 No)"),
            checks=[f"all {len(res)} questions of POPE {split}, each once; every label equals POPE's by question id",
                    'the eight-token answer is the greedy token (top_token_id 3869 yes, 1939 no) on every question',
                    'yes answers and F1 (4 decimals) of both readouts, and top_tokens_generated, equal the file\'s summary',
                    f"the summary's f1_gap_8tok_minus_2tok ({summ['f1_gap_8tok_minus_2tok']}) is the difference of the two F1 rounded to 4 decimals; "
                    f"unrounded, the records give {f1['pred_8tok'] - f1['pred_2tok']:.6f}"])


ATT_COLS = ['question_id', 'image', 'label', 'prediction', 'yes_raw', 'no_raw', 'grounding', 'clip_l_max_sim']

def derive_attention(src, commit, pope):
    "The paper's attention diagnostic: per question the yes/no logits, the attention share on the image and CLIP's similarity."
    rel = 'experiments/ugaa_full_adversarial_3000q_diagnostic.json'
    raw, d = read_source(src, rel, commit)
    if not isinstance(d, dict) or 'results' not in d or 'summary' not in d: raise Bad(f"{rel}: field 'results': missing (not the paper's layout)")
    res, summ = d['results'], d['summary']
    split = summ.get('split')
    if split not in SPLITS: raise Bad(f"{rel}: field 'summary.split': {split!r} is not a POPE split")
    spans = set()
    for i, r in enumerate(res):
        _need(rel, i, r, ['question_id', 'label', 'prediction', 'baseline_prediction', 'yes_raw', 'no_raw', 'gap_raw', 'grounding', 'clip_l_max_sim'])
        for k in ('yes_raw', 'no_raw', 'gap_raw', 'grounding', 'clip_l_max_sim'):
            if not isinstance(r[k], (int, float)) or isinstance(r[k], bool) or not math.isfinite(r[k]): raise Bad(f"{rel}: record {i}: field '{k}': {r[k]!r} is not a finite number")
        if r['gap_raw'] != r['yes_raw'] - r['no_raw']: raise Bad(f"{rel}: record {i}: field 'gap_raw': not yes_raw − no_raw")
        if r['prediction'] != ('yes' if r['gap_raw'] > 0 else 'no'): raise Bad(f"{rel}: record {i}: field 'prediction': {r['prediction']!r} against gap_raw {r['gap_raw']}")
        if r['baseline_prediction'] != r['prediction']: raise Bad(f"{rel}: record {i}: field 'baseline_prediction': differs from prediction (this deriver keeps one)")
        spans.add(json.dumps(r.get('visual_span')))
    keys = _join_pope(rel, res, pope, split)
    c = Counter((r['prediction'] == 'yes', r['label'] == 'yes') for r in res)
    got = dict(tp=c[True, True], tn=c[False, False], fp=c[True, False], fn=c[False, True])
    if any(got[k] != summ.get(k) for k in got): raise Bad(f"{rel}: field 'summary': the records give {got}")
    ties = sum(r['gap_raw'] == 0 for r in res)
    rows = [dict(question_id=q, image=img, label=lab, **{k: r[k] for k in ATT_COLS[3:]}) for (q, img, lab), r in zip(keys, res)]
    yield f'attention_{split}.csv', rows, dict(
        source=rel, source_sha256=hashlib.sha256(raw).hexdigest(), summary=summ,
        columns=dict(question_id="POPE's question id", image="the question's image, from POPE's question file by question id",
                     label="the file's label (equal to POPE's)", prediction="the file's prediction: yes when yes_raw > no_raw",
                     yes_raw="the file's yes logit", no_raw="the file's no logit",
                     grounding="the file's grounding: its measure of the answer position's attention to the image patches, an average of attention weights over the image positions and the layers in summary.layers_for_grounding (by the repository's src/run_full_diagnostic_3000q.py at 08a10ab0), not a share that sums to 1",
                     clip_l_max_sim="the file's clip_l_max_sim"),
        checks=[f"all {len(res)} questions of POPE {split}, each once; every label equals POPE's by question id",
                'gap_raw equals yes_raw − no_raw exactly on every record (so it is left out)',
                f'prediction is yes exactly when gap_raw > 0 ({ties} exact ties, all no)',
                'baseline_prediction equals prediction on every record (so it is left out)',
                f"visual_span is {' and '.join(sorted(spans))} on every record (so it is left out)",
                f"the confusion counts from label and prediction equal the summary's ({got})"])


DERIVERS = {'gap': derive_gap, 'attention': derive_attention}


def csv_text(rows) -> str:
    f = io.StringIO()
    w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator='\n'); w.writeheader(); w.writerows(rows)
    return f.getvalue()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('src', type=Path, help='a local copy of Kesav2k04/ugaa-research (clone, mirror, or a folder of the same paths)')
    p.add_argument('--commit', help='the commit the copy was taken at (read from git when the copy is a clone)')
    p.add_argument('--only', nargs='+', choices=list(DERIVERS), help='derivers to run (default: all)')
    p.add_argument('--out', type=Path, default=OUT)
    p.add_argument('--note', help='how the copy was obtained, kept in the provenance')
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from pope_audit.foundation.core import atomic_write
    try:
        commit = commit_of(a.src, a.commit)
        pope, pope_name = pope_questions()
        made = [(n, *m) for n in a.only or DERIVERS for m in DERIVERS[n](a.src, commit, pope)]
    except Bad as e: sys.exit(print(f'paper_fixtures: {e}', file=sys.stderr) or 2)
    prov_path = a.out/'provenance.json'
    prov = json.loads(prov_path.read_text()) if prov_path.exists() else {}
    for deriver, fname, rows, info in made:
        text = csv_text(rows)
        atomic_write(a.out/fname, text)
        prov[fname] = dict(repository=REPO, commit=commit, **info, rows=len(rows), sha256=hashlib.sha256(text.encode()).hexdigest(),
                           pope=pope_name, derived_by=f'tests/paper_fixtures.py ({deriver})', **({'note': a.note} if a.note else {}))
        print(f'{fname}: {len(rows)} rows from {info["source"]} at {commit[:8]}')
    atomic_write(prov_path, json.dumps(dict(sorted(prov.items())), indent=1, ensure_ascii=False) + '\n')


if __name__ == '__main__': main()
