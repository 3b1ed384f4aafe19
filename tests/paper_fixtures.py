"""Derive small fixtures from the paper's public repository (Kesav2k04/ugaa-research), with their provenance.

    python tests/paper_fixtures.py PATH/TO/ugaa-research [--commit HASH] [--only gap] [--out tests/reference/paper]

PATH is a local copy of the repository: a clone (`git clone https://github.com/Kesav2k04/ugaa-research`), the mirror
path the search tool's `fetch` returns, or a folder holding the same paths. Each deriver reads the files it names,
checks them (counts against the file's own summary, labels against POPE's question files), and writes a small CSV
plus an entry in provenance.json (repository, commit, source path and sha256, what was checked). The repository's
files are never copied into this one: only what a chapter needs, derived.

Derivers (add one to DERIVERS to derive more, e.g. the attention-diagnostic data for the site):
  gap  experiments/pope_{split}_2tok_vs_8tok.json -> gap_{split}.csv: question_id, image, label, pred_2tok, pred_8tok
       (the paper's per-question readouts; each question's image from LLaVA's copy of POPE, which the paper ran on)
"""
import argparse, csv, hashlib, json, subprocess, sys
from pathlib import Path

REPO = 'Kesav2k04/ugaa-research'
ROOT = Path(__file__).resolve().parent.parent

def sha256(p): return hashlib.sha256(Path(p).read_bytes()).hexdigest()

def commit_of(src:Path, given:str|None) -> str:
    "The commit of a clone or mirror (git), else the one given."
    for args in (['git', '-C', str(src), 'rev-parse', 'HEAD'], ['git', '--git-dir', str(src), 'rev-parse', 'HEAD']):
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode == 0: return r.stdout.strip()
    if not given: sys.exit('paper_fixtures: not a git clone: give the commit the copy was taken at (--commit)')
    return given

def read_source(src:Path, rel:str, commit:str) -> tuple[bytes, str]:
    "A file of the copy: from the work tree, else from a bare mirror at `commit`."
    p = src/rel
    if p.is_file(): return p.read_bytes(), f'{rel}'
    r = subprocess.run(['git', '--git-dir', str(src), 'show', f'{commit}:{rel}'], capture_output=True)
    if r.returncode: raise FileNotFoundError(f'{rel} is not in {src}')
    return r.stdout, rel

def pope_images(split:str) -> dict:
    "question id -> (image, label) from LLaVA's copy of POPE in the shared folder (the paper ran LLaVA's questions)."
    sys.path.insert(0, str(ROOT))
    from pope_audit.core import shared_dir
    f = shared_dir(required=True)/'data/pope/llava/coco'/f'coco_pope_{split}.json'
    return {int(o['question_id']): (o['image'], o['label']) for o in map(json.loads, f.read_text().splitlines()) if o}

def derive_gap(src, commit, out, split='adversarial'):
    rel = f'experiments/pope_{split}_2tok_vs_8tok.json'
    raw, where = read_source(src, rel, commit)
    d = json.loads(raw)
    res, summ = d['results'], d['summary']
    qs = pope_images(split)
    rows = []
    for r in res:
        q = int(r['question_id'])
        if q not in qs: raise ValueError(f'{rel}: question {q} is not in POPE {split}')
        img, lab = qs[q]
        if lab != r['label']: raise ValueError(f'{rel}: question {q} is labelled {r["label"]}, POPE says {lab}')
        if (r['pred_8tok'] == 'yes') != (r['top_token_id'] == 3869): raise ValueError(f'{rel}: question {q}: the eight-token answer is not the greedy token')
        rows.append(dict(question_id=q, image=img, label=lab, pred_2tok=r['pred_2tok'], pred_8tok=r['pred_8tok']))
    complete = len(rows) == summ['n']
    checks = [f'{len(rows)} of the {summ["n"]} results in the file; every label equals LLaVA-copy POPE {split} by question id',
              'the eight-token answer is the greedy token (3869 yes, 1939 no) on every question']
    if complete:
        for k, col in (('eval_2token', 'pred_2tok'), ('eval_8token', 'pred_8tok')):
            n_yes = sum(r[col] == 'yes' for r in rows)
            tp = sum(r[col] == 'yes' and r['label'] == 'yes' for r in rows); pos = sum(r['label'] == 'yes' for r in rows)
            f1 = round(2 * tp / (n_yes + pos), 4)
            if n_yes != summ[k]['yes_predictions'] or f1 != summ[k]['f1']: raise ValueError(f'{rel}: {col} gives {n_yes} yes and F1 {f1}, the summary {summ[k]}')
        checks.append('yes answers and F1 of both readouts equal the file\'s summary')
    name = f'gap_{split}.csv'
    with open(out/name, 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)
    return name, dict(source=where, source_sha256=hashlib.sha256(raw).hexdigest(), rows=len(rows), complete=complete, summary=summ, checks=checks)

DERIVERS = {'gap': derive_gap}

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('src', type=Path, help='a local copy of Kesav2k04/ugaa-research (clone, mirror, or a folder of the same paths)')
    p.add_argument('--commit', help='the commit the copy was taken at (read from git when the copy is a clone)')
    p.add_argument('--only', nargs='+', choices=list(DERIVERS), help='derivers to run (default: all)')
    p.add_argument('--out', type=Path, default=ROOT/'tests/reference/paper')
    p.add_argument('--note', help='a sentence about the copy, kept in the provenance')
    a = p.parse_args(argv)
    commit = commit_of(a.src, a.commit)
    a.out.mkdir(parents=True, exist_ok=True)
    prov_path = a.out/'provenance.json'
    prov = json.loads(prov_path.read_text()) if prov_path.exists() else {}
    for name in a.only or DERIVERS:
        fname, info = DERIVERS[name](a.src, commit, a.out)
        prov[fname] = dict(repository=REPO, commit=commit, sha256=sha256(a.out/fname), **info, **({'note': a.note} if a.note else {}))
        print(f'{fname}: {info["rows"]} rows from {info["source"]} ({"complete" if info["complete"] else "partial"})')
    prov_path.write_text(json.dumps(prov, indent=1) + '\n')

if __name__ == '__main__': main()
