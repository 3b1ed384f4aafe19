"MME end to end: the official rule and printout against calculation.py's own outputs, the result folder, the hub loader on a stand-in, and bad input."
import json, subprocess, sys
from pathlib import Path
import pytest
from pope_audit.interface.cli import main
from pope_audit.benchmarks.mme import mme_answer, MME_GROUPS, MME_SUBTASKS, mme_scores, calculation_text, read_mme_questions, read_hf_mme
from pope_audit.benchmarks.scoring import load_answers, predictions

REF = json.loads((Path(__file__).parent/'reference/mme/calculation_outputs.json').read_text())
ORDER = [t for ts in MME_GROUPS.values() for t in ts]


def answer(kind, j, label):
    "The answers the reference run gave (its `assignment`)."
    if kind == 'battery': return REF['battery'][j % len(REF['battery'])]
    return ('The answer is ' + label.lower()) if j % 3 == 0 else label


def result_folder(shared, folder, kind='battery', eol='\n', bom=False, subtasks=ORDER):
    folder.mkdir(parents=True, exist_ok=True)
    j = 0
    for t in ORDER:
        lines = (shared/f'data/mme/questions/{t}.txt').read_text().splitlines()
        text = ''.join(f'{l}\t{answer(kind, j + i, l.split(chr(9))[2])}{eol}' for i, l in enumerate(lines))
        j += len(lines)
        if t in subtasks: (folder/f'{t}.txt').write_bytes((('\ufeff' if bom else '') + text).encode())
    return folder


def score(args, capsys):
    main(['score', *map(str, args), '--json', '--boot', '0'])
    return json.loads(capsys.readouterr().out)


def test_rule_is_calculation_py():
    "Every answer of the battery reads as calculation.py reads it (with or without the line's newline)."
    assert [mme_answer(b) for b in REF['battery']] == REF['parsed'] == REF['parsed_with_newline']
    assert mme_answer('Not sure') == 'no' and mme_answer('The answer is yes') == 'other'


def test_lmms_rule_is_lmms_eval():
    "lmms-eval's MME parse_pred_ans, run once on the battery (tests/reference/mme/lmms_eval_mme_parse.json)."
    from pope_audit.benchmarks.mme import lmms_mme_answer
    ref = json.loads((Path(__file__).parent/'reference/mme/lmms_eval_mme_parse.json').read_text())
    assert [lmms_mme_answer(a) for a in ref['answers']] == ref['parsed']
    assert sum(lmms_mme_answer(a) != mme_answer(a) for a in ref['answers']) >= 5      # the two rules part on this battery


@pytest.mark.parametrize('kind', ['battery', 'mostly_right'])
def test_printout_is_calculation_py(shared, tmp_path, kind):
    "calculation.py's printout, character for character, from a result folder."
    recs = load_answers(result_folder(shared, tmp_path/kind, kind)).records
    assert len(recs) == 2374
    sc = mme_scores(predictions(recs, ['mme']))
    assert calculation_text(sc, 'mme') == REF['printed'][kind]


def test_score_cli(shared, tmp_path, capsys):
    "score reads the folder (CRLF and a BOM too), names the benchmark, gives every readout's MME scores and writes them to the results JSON."
    d = result_folder(shared, tmp_path/'crlf', 'mostly_right', eol='\r\n', bom=True)
    doc = score([d, '--out', tmp_path/'res'], capsys)
    assert doc['benchmark'] == 'mme' and doc['kind'] == 'mme'
    assert doc['mme']['calculation_py']['mme'] == REF['printed']['mostly_right']
    tot = {(r['readout'], r['group']): r for r in doc['mme']['totals']}
    assert tot['mme', 'Perception']['as_printed'] == '1001.9117647058823' and tot['mme', 'Cognition']['out_of'] == 800
    assert {'pope_parse', 'lmms_exact', 'vlmeval_yorn', 'mme', 'lmms_mme'} == {r for r, _ in tot}
    # lmms_exact refuses 'The answer is yes' too, but pope_parse reads it as yes: the totals differ by readout
    assert tot['pope_parse', 'Perception']['score'] > tot['mme', 'Perception']['score']
    res = json.loads(next((tmp_path/'res').glob('results_*.json')).read_text())
    assert res['benchmark'] == 'mme' and res['mme']['totals'] == doc['mme']['totals']
    main(['score', str(d), '--boot', '0'])
    out = capsys.readouterr().out
    assert 'as calculation.py prints them' in out and REF['printed']['mostly_right'] in out


def test_questions_line_for_line(shared, tmp_path, capsys):
    "Against the question files, answers shifted by a line are refused; matching ones are checked."
    d = result_folder(shared, tmp_path/'ok')
    doc = score([d, '--questions', shared/'data/mme/questions'], capsys)
    assert sum(r['text_checked'] for r in doc['pairings']) == 2374
    lines = (d/'count.txt').read_text().splitlines(keepends=True)
    (d/'count.txt').write_text(''.join(lines[2:4] + lines[:2] + lines[4:]))       # two images swapped
    with pytest.raises(SystemExit) as e: score([d, '--questions', shared/'data/mme/questions'], capsys)
    assert e.value.code == 2
    assert "count.txt:1: field 'question': answer joined to question 1 of 'count'" in capsys.readouterr().err
    (d/'count.txt').write_text(''.join(lines[:-2]))
    with pytest.raises(SystemExit): score([d, '--questions', shared/'data/mme/questions'], capsys)
    assert 'count.txt:59: 58 lines, the question set has 60 for count: answers must match' in capsys.readouterr().err


BAD = [  # (subtask, edit of its lines, expected message)
    ('color', lambda ls: ls[:1] + ['\t'.join(ls[1].split('\t')[:3]) + '\n'] + ls[2:], "color.txt:2: field 'response': no fourth column"),
    ('color', lambda ls: [ls[0].rstrip('\n') + '\tmore\n'] + ls[1:], "color.txt:1: field 'response': 5 tab-separated fields"),
    ('color', lambda ls: ls[1:], "color.txt:1: field 'image': image '000000006723.jpg' has no pair"),
    ('color', lambda ls: ls[:3] + ['\n'] + ls[3:], 'color.txt:4: blank line'),
]


@pytest.mark.parametrize('sub,edit,msg', BAD)
def test_bad_result_lines(shared, tmp_path, capsys, sub, edit, msg):
    d = result_folder(shared, tmp_path/'bad')
    (d/f'{sub}.txt').write_text(''.join(edit((d/f'{sub}.txt').read_text().splitlines(keepends=True))))
    with pytest.raises(SystemExit) as e: score([d], capsys)
    assert e.value.code == 2 and msg in capsys.readouterr().err


def test_pair_split_and_missing_files(shared, tmp_path, capsys):
    "A pair split across two files is named as such; a missing subtask file is refused by name unless --splits leaves it out."
    d = result_folder(shared, tmp_path/'split')
    a, b = (d/'OCR.txt').read_text().splitlines(True), (d/'code_reasoning.txt').read_text().splitlines(True)
    (d/'OCR.txt').write_text(''.join(a[1:])); (d/'code_reasoning.txt').write_text(''.join(b + a[:1]))
    with pytest.raises(SystemExit): score([d], capsys)
    assert "OCR.txt:1: field 'image': image '0001.jpg' has one question here and its pair in code_reasoning.txt line 41" in capsys.readouterr().err
    d = result_folder(shared, tmp_path/'part', subtasks=['existence', 'count', 'OCR'])
    with pytest.raises(SystemExit): score([d], capsys)
    assert '11 of the MME subtask files are missing: position.txt, color.txt' in capsys.readouterr().err
    doc = score([d, '--splits', 'existence', 'count'], capsys)
    tot = {r['group']: r for r in doc['mme']['totals'] if r['readout'] == 'mme'}
    assert tot['Perception']['subtasks'] == 2 and 'OCR' in tot['Perception']['missing'] and tot['Cognition']['as_printed'] == '0'


def test_hub_loader_on_standin(tmp_path):
    "The lmms-lab/MME schema (tests/fixtures/mme/hub_schema.json), saved locally with stand-in images, loads into MME's question table."
    import datasets
    from PIL import Image
    fx = json.loads((Path(__file__).parent/'fixtures/mme/hub_schema.json').read_text())
    rows = fx['rows']
    feats = datasets.Features({k: datasets.Image() if v == 'Image' else datasets.Value(v) for k, v in fx['features'].items()})
    cols = {k: [r.get(k) for r in rows] for k in fx['features'] if k != 'image'}
    cols['image'] = [Image.new('RGB', (8, 8), (i * 60, 0, 0)) for i in range(len(rows))]
    datasets.Dataset.from_dict(cols, features=feats).save_to_disk(str(tmp_path/'mme'))
    q, imgs = read_hf_mme(str(tmp_path/'mme'))
    assert list(q.split) == ['code_reasoning'] * 2 + ['existence'] * 2 and list(q.question_id) == [1, 2, 1, 2]
    assert list(q.image) == [r['question_id'] for r in rows] and list(q.label) == ['yes', 'no', 'yes', 'no']
    assert imgs.load('existence/000000006040.jpg').getpixel((0, 0)) == (120, 0, 0)
    off = read_mme_questions(_shared()/'data/mme/questions')
    for r in q.itertuples():
        o = off[(off.split == r.split) & (off.image == r.image) & (off.question == r.question)]
        assert list(o.label) == [r.label]     # the sample agrees with the eval tool's files


def _shared():
    from pope_audit.foundation.core import shared_dir
    return shared_dir(required=True)


def test_ls_benchmarks(capsys):
    main(['ls', 'benchmarks'])
    out = capsys.readouterr().out
    assert out.split()[0] == 'pope' and 'mme ' in out and 'official rule mme' in out and 'lmms-lab/MME' in out


def test_no_torch(shared, tmp_path):
    "The benchmark layer and MME's scores import no torch (the light commands' part of the promise)."
    d = result_folder(shared, tmp_path/'f')
    code = ("import sys; from pope_audit.benchmarks.scoring import load_answers; from pope_audit.benchmarks.benchmark import benchmark_scores; "
            f"doc, text = benchmark_scores(load_answers({str(d)!r})); assert doc['benchmark'] == 'mme'; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize('fmt', ['lmms-eval', 'vlmevalkit'])
def test_logs_of_mme(shared, tmp_path, capsys, fmt):
    "lmms-eval's and VLMEvalKit's MME logs score as calculation.py scores the same answers, with or without the question files."
    from pope_audit.benchmarks.scoring import write_vlmeval_table
    recs = load_answers(result_folder(shared, tmp_path/'f', 'battery')).records
    if fmt == 'lmms-eval':
        log = tmp_path/'samples.jsonl'
        with open(log, 'w') as f:
            for i, r in enumerate(recs):
                doc = dict(question_id=r.image, question=r.question, answer=r.label.capitalize(), category=r.split)
                f.write(json.dumps(dict(doc_id=i, doc=doc, target=doc['answer'], resps=[[r.text]], filtered_resps=[r.text])) + '\n')
    else:
        log = tmp_path/'MME.tsv'
        write_vlmeval_table(recs, log)
    for extra in ([], ['--questions', shared/'data/mme/questions']):
        doc = score([log, *extra], capsys)
        assert doc['benchmark'] == 'mme' and doc['kind'] == fmt
        assert doc['mme']['calculation_py']['mme'] == REF['printed']['battery']


def test_run_mme(shared, tmp_path, capsys):
    "run detects MME's question folder, finds images in either release layout, and its records score as MME."
    from pope_audit.models.tiny import stand_in_images
    from pope_audit.models.tinyvlm import tiny_vlm_dir
    q = read_mme_questions(shared/'data/mme/questions', ['existence', 'artwork'])
    names = q.groupby('split').head(2).image
    for t in ('existence', 'artwork/images'): (tmp_path/'img'/t).mkdir(parents=True)
    stand_in_images([n for n in names if n.startswith('existence/')], tmp_path/'img', size=(32, 32))
    stand_in_images([n.split('/')[1] for n in names if n.startswith('artwork/')], tmp_path/'img/artwork/images', size=(32, 32))
    main(['run', '--model', tiny_vlm_dir('llava15'), '--questions', shared/'data/mme/questions', '--images', tmp_path/'img',
          '--splits', 'existence', 'artwork', '--limit', '2', '--max-new-tokens', '2', '--out', tmp_path/'run', '--json'])
    capsys.readouterr()
    doc = score([tmp_path/'run'], capsys)
    assert doc['benchmark'] == 'mme' and [r['subtask'] for r in doc['mme']['subtasks'] if r['readout'] == 'mme'] == ['existence', 'artwork']
    assert all(r['images'] == 1 and r['questions'] == 2 for r in doc['mme']['subtasks'])
    main(['report', tmp_path/'run'])
    assert (tmp_path/'run/report.html').is_file() and 'artwork' in (tmp_path/'run/report.md').read_text()
    capsys.readouterr()
    part = tmp_path/'part'; part.mkdir()                                    # a folder with two subtask files runs with --splits
    for t in ('existence', 'artwork'): (part/f'{t}.txt').write_bytes((shared/f'data/mme/questions/{t}.txt').read_bytes())
    main(['run', '--model', tiny_vlm_dir('llava15'), '--questions', part, '--images', tmp_path/'img', '--splits', 'existence',
          '--limit', '2', '--max-new-tokens', '1', '--out', tmp_path/'run3', '--json'])
    assert json.loads(capsys.readouterr().out)['records'] == 2
    with pytest.raises(SystemExit) as e:
        main(['run', '--model', tiny_vlm_dir('llava15'), '--benchmark', 'mme', '--questions', shared/'data/pope/coco',
              '--images', tmp_path/'img', '--out', tmp_path/'run2'])
    assert e.value.code == 2 and '14 of the MME subtask files are missing' in capsys.readouterr().err
