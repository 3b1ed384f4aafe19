"Every log the field writes is read, and each tool's numbers come out as that tool prints them: checked against the peers' own code, run once on the real LLaVA answers (tests/reference/peers/)."
import json, shutil, sys
from pathlib import Path
import pandas as pd
import pytest
from pope_audit.foundation.core import InputError
from pope_audit.benchmarks.scoring import load_answers, as_printed

sys.path.insert(0, str(Path(__file__).parent))
import peer_inputs as P

REF = json.loads((Path(__file__).parent/'reference/peers/peer_outputs.json').read_text())
SETS = ['13b', '7b', '13b-perturbed']


from conftest import run_cli as run


@pytest.fixture(scope='module')
def llava(shared):
    from pope_audit.foundation.data import load_questions
    root = shared/'data/pope/llava'
    q, _ = load_questions([root/'llava_pope_test.jsonl'], root/'coco')
    qs = P.llava_questions(shared)
    a13 = P.llava_answers(shared, '13b')
    return dict(q=q, qs=qs, root=root, answers={'13b': a13, '7b': P.llava_answers(shared, '7b'), '13b-perturbed': P.perturbed(a13, qs)})


def printed(recs, tool):
    return {(r['split'], r['metric']): r['value'] for r in as_printed(recs) if r['tool'] == tool}


def test_perturbed_copy_holds_every_shape(llava):
    texts = {a['text'] for a in llava['answers']['13b-perturbed']}
    for t in ('Yes.', 'yes', ' Yes ', 'I am not sure.', 'Yes and no.', 'YES!', '', 'Yes, there is a snowboard in the image.'):
        assert t in texts
    assert any(t.startswith('There is not a ') for t in texts)


@pytest.mark.parametrize('name', SETS)
def test_lmms_eval_as_printed(llava, tmp_path, name):
    "0.4 layout (no doc, doc_id a position): every metric lmms-eval's utils print, to 4 decimals; yes-ratio counts labels."
    files = P.write_lmms(llava['answers'][name], llava['qs'], tmp_path, '0.4')
    got = printed(load_answers(files, questions=llava['q']).records, 'lmms-eval')
    ref = REF[name]['lmms_eval']
    assert {s for s, _ in got} == set(ref)
    for s, ms in ref.items():
        for m, v in ms.items(): assert got[s, m] == pytest.approx(round(v, 4), abs=5e-5), (s, m)
    if name == '13b': assert got['random', 'pope_yes_ratio'] == 0.5155     # 1,500 positives of LLaVA's 2,910


@pytest.mark.parametrize('name', SETS)
def test_vlmevalkit_as_printed(llava, tmp_path, name):
    "VLMEvalKit's own table (one row per image+question, splits comma-joined) exploded, joined by image and question text."
    p = tmp_path/'POPE_model.tsv'
    P.vlmeval_table(llava['answers'][name], llava['qs']).to_csv(p, sep='\t', index=False)
    for q in (llava['q'], None):                                           # joined, and on its own answer column
        got = printed(load_answers(p, questions=q).records, 'VLMEvalKit')
        ref = REF[name]['vlmevalkit']
        assert {s for s, _ in got} == set(ref)
        for s, ms in ref.items():
            for m, v in ms.items(): assert got[s, m] == pytest.approx(v, abs=5e-5), (s, m)


@pytest.mark.parametrize('name', SETS)
def test_llava_eval_pope_as_printed(llava, tmp_path, name):
    f = P.write_llava(llava['answers'][name], tmp_path/'answers.jsonl')
    got = printed(load_answers(f, questions=llava['q']).records, 'LLaVA eval_pope.py')
    for s, ms in REF[name]['llava_eval_pope'].items():
        for m, v in ms.items():
            if m != 'line': assert got[s, m] == pytest.approx(v, abs=5e-5), (s, m)


@pytest.mark.parametrize('name', SETS)
def test_paper_package_as_printed(llava, tmp_path, name):
    from pope_audit.foundation.data import load_questions
    for s, ref in REF[name]['paper_package'].items():
        pf = P.write_line_aligned(llava['answers'][name], llava['qs'], s, tmp_path/f'preds_{s}.txt')
        q, _ = load_questions([llava['root']/f'coco/coco_pope_{s}.json'])
        ans = load_answers(pf, questions=q)
        assert ans.kind == 'lines' and 'only the count was verified' in ans.notes[0]
        got = printed(ans.records, "the paper's package")
        for m in ('precision', 'recall', 'f1', 'tp', 'fp', 'fn'): assert got[s, m] == ref[m], (s, m)


def test_unknown_vlmevalkit_matches_all_four(llava, tmp_path):
    "No other policy gives VLMEvalKit's four numbers; --unknown vlmevalkit does (perturbed answers: some are Unknown)."
    from pope_audit.benchmarks.scoring import score_records
    p = tmp_path/'POPE_model.tsv'
    P.vlmeval_table(llava['answers']['13b-perturbed'], llava['qs']).to_csv(p, sep='\t', index=False)
    recs = load_answers(p, questions=llava['q']).records
    ref = REF['13b-perturbed']['vlmevalkit']
    for policy, ok in (('vlmevalkit', True), ('wrong', False), ('no', False)):
        st = score_records(recs, ['vlmeval_yorn'], unknown=policy).set_index('split')
        same = all(abs(st.loc[s, m] * 100 - ref[s][k]) < 5e-5 for s in ('adversarial', 'popular', 'random')
                   for m, k in (('accuracy', 'acc'), ('precision', 'precision'), ('recall', 'recall'), ('f1', 'Overall')))
        assert same == ok, policy


# --- the command line: layouts, several files, folders, and bad input -------------------------------------------------

@pytest.fixture
def small(llava, tmp_path):
    "The random split only: 13B answers in each tool's layout."
    a = [x for x in llava['answers']['13b-perturbed'] if x['question_id'] > 10_000_000 and x['question_id'] < 20_000_000]
    return a, tmp_path


def qargs(llava): return ['--questions', llava['root']/'llava_pope_test.jsonl', '--labels', llava['root']/'coco']


def test_cli_lmms_layouts_and_folder(llava, small, capsys):
    a, d = small
    (f04,) = P.write_lmms(a, llava['qs'], d/'new', '0.4')
    (f02,) = P.write_lmms(a, llava['qs'], d/'old', '0.2')
    (d/'old/results.json').write_text(json.dumps({'results': {}}))        # the folder's other files are not answers
    code, out, err = run(capsys, 'score', d/'old', '--boot', '0', '--json')
    assert code == 0, err
    r = json.loads(out)
    ap = {(x['split'], x['metric']): x['value'] for x in r['as_printed']}
    assert set(r['as_printed'][0]) == {'tool', 'split', 'metric', 'value'} and ap['random', 'pope_yes_ratio'] == 0.5155
    code, out, err = run(capsys, 'score', f04, f02, '--boot', '0', *qargs(llava))
    assert code == 2 and 'answered in two files' in err
    code, out, err = run(capsys, 'score', f04, '--boot', '0', *qargs(llava))
    assert code == 0, err
    assert 'as lmms-eval prints it' in out and 'counts labels, not predictions' in out


def test_cli_lmms_split_from_name_or_option(llava, small, capsys):
    a, d = small
    (f,) = P.write_lmms(a, llava['qs'], d, '0.4')
    g = f.rename(d/'samples_pope.jsonl')                                  # the all-split task: names no split
    code, _, err = run(capsys, 'score', g, '--boot', '0', *qargs(llava))
    assert code == 2 and 'samples_pope.jsonl:1:' in err and '--split' in err
    code, out, err = run(capsys, 'score', g, '--split', 'random', '--boot', '0', *qargs(llava))
    assert code == 0, err
    code, _, err = run(capsys, 'score', g, '--split', 'adversarial,random', '--boot', '0', *qargs(llava))
    assert code == 2 and 'names several splits' in err
    code, _, err = run(capsys, 'score', g, '--split', 'adversarial', '--boot', '0', *qargs(llava))
    assert code == 2 and 'samples_pope.jsonl:2:' in err and 'different question' in err   # position 1 of adversarial asks about another object


def test_cli_lmms_duplicates(llava, small, capsys):
    a, d = small
    (f,) = P.write_lmms(a, llava['qs'], d, '0.4')
    lines = f.read_text().splitlines(keepends=True)
    f.write_text(''.join(lines + lines[:5]))                              # a rerun appended
    code, out, err = run(capsys, 'score', f, '--boot', '0', *qargs(llava))
    assert code == 0 and '5 identical duplicate lines dropped' in out
    o = json.loads(lines[0]); o['resps'] = [['No']]; o['filtered_resps'] = ['No']
    f.write_text(''.join(lines + [json.dumps(o) + '\n']))
    code, _, err = run(capsys, 'score', f, '--boot', '0', *qargs(llava))
    assert code == 2 and f':{len(lines) + 1}:' in err and 'different answer' in err


def test_cli_vlmevalkit_joins_by_image_and_question(llava, small, capsys):
    a, d = small
    t = P.vlmeval_table(llava['answers']['13b'], llava['qs'])
    p = d/'POPE.tsv'; t.to_csv(p, sep='\t', index=False)
    code, out, err = run(capsys, 'score', p, '--boot', '0', '--json', *qargs(llava))
    assert code == 0, err
    r = json.loads(out)
    assert {c['split']: c['answered'] for c in r['coverage']} == {'adversarial': 3000, 'popular': 3000, 'random': 2910}
    code, out, err = run(capsys, 'score', p, '--boot', '0')
    assert code == 0 and "labels are the table's own answer column" in out
    bad = t.copy(); bad.loc[7, 'question'] = 'Is there a giraffe wearing a hat in the image?'
    bad.to_csv(p, sep='\t', index=False)
    code, _, err = run(capsys, 'score', p, '--boot', '0', *qargs(llava))
    assert code == 2 and 'POPE.tsv:9:' in err and 'cannot be joined by image and question' in err
    t.drop(columns='image_path').to_csv(p, sep='\t', index=False)
    code, _, err = run(capsys, 'score', p, '--boot', '0', *qargs(llava))
    assert code == 2 and 'no image_path' in err


def test_cli_line_aligned(llava, small, capsys):
    a, d = small
    pf = P.write_line_aligned(a, llava['qs'], 'random', d/'preds.txt')
    pope = llava['root']/'coco/coco_pope_random.json'
    code, out, err = run(capsys, 'score', pf, '--questions', pope, '--boot', '0')
    assert code == 0, err
    assert 'only the count was verified' in out and "as the paper's package prints it" in out
    pf.write_text(''.join(pf.read_text().splitlines(keepends=True)[:-1]))
    code, _, err = run(capsys, 'score', pf, '--questions', pope, '--boot', '0')
    assert code == 2 and 'preds.txt:2910:' in err and '2909 lines' in err


def test_several_splits_never_one_name(tmp_path, capsys):
    p = tmp_path/'p.csv'
    pd.DataFrame(dict(question_id=[1, 2], label=['yes', 'no'], a=['yes', 'no'], split='adversarial,random')).to_csv(p, index=False)
    code, _, err = run(capsys, 'score', p, '--boot', '0')
    assert code == 2 and 'p.csv:2:' in err and 'names several splits' in err


def test_cli_lmms_doc_id_checked(llava, small, capsys):
    a, d = small
    (f,) = P.write_lmms(a, llava['qs'], d, '0.4')
    lines = f.read_text().splitlines(keepends=True)
    o = json.loads(lines[3]); o['doc_id'] = 2910
    f.write_text(''.join(lines[:3] + [json.dumps(o) + '\n']))
    code, _, err = run(capsys, 'score', f, '--boot', '0', *qargs(llava))
    assert code == 2 and ':4:' in err and 'not a position among the 2910 random questions' in err
    o['doc_id'] = 4; o['target'] = 'no' if o['target'] == 'yes' else 'yes'   # another question's place, and its label
    f.write_text(''.join(lines[:3] + [json.dumps(o) + '\n']))
    code, _, err = run(capsys, 'score', f, '--boot', '0', *qargs(llava))
    assert code == 2 and ':4:' in err


def test_lmms_all_split_task_prints_one_pooled_row(llava, tmp_path):
    "lmms-eval's `pope` task (every split in one task, each sample with doc) prints one row: pooled over the splits."
    files = P.write_lmms(llava['answers']['13b'], llava['qs'], tmp_path/'old', '0.2')
    logs = [o for f in files for o in json.loads(f.read_text())['logs']]
    f = tmp_path/'20250101_samples_pope.jsonl'
    f.write_text(''.join(json.dumps(o) + '\n' for o in logs))
    got = printed(load_answers(f).records, 'lmms-eval')
    assert {s for s, _ in got} == {'pooled'}
    ref, n = REF['13b']['lmms_eval'], {'adversarial': 3000, 'popular': 3000, 'random': 2910}
    for m in ('pope_accuracy', 'pope_yes_ratio'):
        assert got['pooled', m] == pytest.approx(round(sum(ref[s][m] * n[s] for s in n) / 8910, 4), abs=5e-5)
