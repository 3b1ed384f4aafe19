"Trust in results: plain predictions tables as input, strict JSON, exact ties, and joins that are verified, not assumed."
import json
import pandas as pd
import pytest
from pope_audit.interface.cli import main
from pope_audit.foundation.readouts import Record

OFFICIAL_V = 'POPE official (COCO, POPE repository)'
LLAVA_V = "LLaVA's older copy of POPE (COCO)"


from conftest import run_cli as run


def no_nan(c): raise ValueError(f'not strict JSON: {c}')
def strict(s): return json.loads(s, parse_constant=no_nan)


def paper_table(n_yes=1500):
    "3,000 adversarial rows: A (pred_8tok) is the paper's eight-token matrix; B (pred_2tok) flips known counts of it."
    rows, qid = [], 0
    def add(label, a, b, k):
        nonlocal qid
        for _ in range(k):
            qid += 1
            rows.append(dict(question_id=qid, label=label, pred_2tok=b, pred_8tok=a, top_token_id=3869 if a == 'yes' else 1939))
    add('yes', 'yes', 'yes', 1174 - 30); add('yes', 'yes', 'no', 30)        # TP, 30 of them flip to FN
    add('no', 'no', 'no', 1318 - 660); add('no', 'no', 'yes', 660)          # TN, 660 flip to FP
    add('no', 'yes', 'yes', 182 - 20); add('no', 'yes', 'no', 20)           # FP, 20 flip to TN
    add('yes', 'no', 'no', 326 - 264); add('yes', 'no', 'yes', 264)         # FN, 264 flip to TP
    return pd.DataFrame(rows)


@pytest.fixture
def preds_csv(tmp_path):
    p = tmp_path/'preds_adv.csv'
    paper_table().assign(split='adversarial').to_csv(p, index=False)
    return p


# --- predictions tables --------------------------------------------------------------------------------------------

@pytest.mark.parametrize('ext', ['csv', 'tsv', 'parquet', 'jsonl'])
def test_predictions_table_every_format(tmp_path, capsys, ext):
    t = paper_table()
    p = tmp_path/f'preds.{ext}'
    if ext == 'csv': t.to_csv(p, index=False)
    elif ext == 'tsv': t.to_csv(p, sep='\t', index=False)
    elif ext == 'parquet': t.to_parquet(p, index=False)
    else: t.to_json(p, orient='records', lines=True)
    code, out, err = run(capsys, 'score', p, '--split', 'adversarial', '--json', '--boot', '50')
    assert code == 0, err
    r = strict(out)
    assert r['kind'] == 'predictions' and r['set_aside'] == ['top_token_id']
    f1 = {s['readout']: s['f1'] for s in r['scores'] if s['split'] == 'adversarial'}
    assert set(f1) == {'pred_2tok', 'pred_8tok'}                       # column names as given
    assert f1['pred_8tok'] == pytest.approx(2 * 1174 / (2 * 1174 + 182 + 326))
    tp2, fp2, fn2 = 1174 - 30 + 264, 182 - 20 + 660, 326 - 264 + 30
    assert f1['pred_2tok'] == pytest.approx(2 * tp2 / (2 * tp2 + fp2 + fn2))


def test_predictions_csv_is_not_a_vlmevalkit_table(preds_csv, capsys):
    code, out, err = run(capsys, 'score', preds_csv, '--boot', '0')
    assert code == 0, err
    assert 'lacks column' not in err and '(predictions)' in out and 'pred_2tok' in out


def test_kind_predictions_forces_it(tmp_path, capsys):
    "A table that also has VLMEvalKit's columns is read as predictions when asked."
    p = tmp_path/'both.tsv'
    paper_table().assign(index=range(3000), prediction='Yes, there is', split='adversarial').to_csv(p, sep='\t', index=False)
    code, _, err = run(capsys, 'score', p, '--boot', '0')
    assert code == 2 and "table lacks column 'question'" in err       # detected as VLMEvalKit's
    code, out, err = run(capsys, 'score', p, '--kind', 'predictions', '--boot', '0', '--json')
    assert code == 0, err
    r = strict(out)
    assert {s['readout'] for s in r['scores']} == {'pred_2tok', 'pred_8tok'} and set(r['set_aside']) == {'top_token_id', 'index', 'prediction'}


def test_split_from_column_or_option(tmp_path, capsys, preds_csv):
    code, _, err = run(capsys, 'score', preds_csv, '--split', 'popular')
    assert code == 2 and 'the table has a split column' in err
    p = tmp_path/'preds.csv'
    paper_table().to_csv(p, index=False)
    code, _, err = run(capsys, 'score', p)
    assert code == 2 and "field 'split'" in err and '--split' in err


def test_score_reports_mcnemar_and_intervals(preds_csv, capsys):
    code, out, err = run(capsys, 'score', preds_csv, '--json', '--boot', '200')
    assert code == 0, err
    r = strict(out)
    (mc,) = r['mcnemar']
    # a = pred_2tok, b = pred_8tok: a right & b wrong = the 264 FN→TP and 20 FP→TN flips; the reverse = 660 + 30
    assert (mc['a'], mc['b'], mc['a_only'], mc['b_only']) == ('pred_2tok', 'pred_8tok', 284, 690)
    assert mc['pvalue'] < 1e-30
    for ci in r['f1_intervals']:
        assert ci['lo'] < ci['f1'] < ci['hi'] and ci['hi'] - ci['lo'] < 0.06
    code, out, _ = run(capsys, 'score', preds_csv, '--boot', '100')
    assert "McNemar's test" in out and 'bootstrap intervals' in out


def test_pairs_asked_for(tmp_path, capsys):
    p = tmp_path/'p.csv'
    paper_table().assign(split='adversarial', pred_x=lambda t: t.pred_8tok).to_csv(p, index=False)
    code, out, err = run(capsys, 'score', p, '--json', '--boot', '0', '--pairs', 'pred_8tok:pred_x')
    assert code == 0, err
    assert [(m['a'], m['b'], m['a_only'], m['b_only']) for m in strict(out)['mcnemar']] == [('pred_8tok', 'pred_x', 0, 0)]
    code, _, err = run(capsys, 'score', p, '--pairs', 'pred_8tok:nope')
    assert code == 2 and "readout 'nope' of pair pred_8tok:nope is not scored here" in err


def test_reconstruct_from_predictions_table(preds_csv, capsys):
    code, out, err = run(capsys, 'reconstruct', preds_csv, '--a', 'pred_8tok', '--b', 'pred_2tok', '--json')
    assert code == 0, err
    (r,) = strict(out)
    assert (r['tn_to_fp'], r['fn_to_tp'], r['tp_to_fn'], r['fp_to_tn']) == (660, 264, 30, 20)
    assert r['rho_N'] == pytest.approx(660 / 1318) and r['f1_b_identity'] == pytest.approx(r['f1_b'])
    code, out, _ = run(capsys, 'reconstruct', preds_csv, '--a', 'pred_8tok', '--b', 'pred_2tok')
    assert 'identity check: F1 of pred_2tok predicted from pred_8tok and the flip rates equals the measured F1' in out
    code, _, err = run(capsys, 'reconstruct', preds_csv)               # defaults name readouts, not columns
    assert code == 2 and "no column 'derived' in the table; its yes/no columns are: pred_2tok, pred_8tok" in err


# --- strict JSON ---------------------------------------------------------------------------------------------------

@pytest.mark.filterwarnings('error')      # an undefined F1 in every resample is no interval, not numpy's All-NaN warning
def test_json_has_no_nan(tmp_path, capsys):
    "No positives in a split: precision, recall, F1 are undefined and must come out as null (and no warning is raised)."
    p = tmp_path/'p.csv'
    pd.DataFrame(dict(question_id=[1, 2, 3], label=['no'] * 3, a=['no', 'no', 'yes'], b=['no'] * 3, split='random')).to_csv(p, index=False)
    code, out, err = run(capsys, 'score', p, '--json', '--boot', '20')
    assert code == 0, err
    assert 'NaN' not in out
    r = strict(out)
    assert [s['f1'] for s in r['scores'] if s['readout'] == 'b'] == [None]
    code, out, _ = run(capsys, 'reconstruct', p, '--a', 'b', '--b', 'a', '--json')
    assert code == 0 and 'NaN' not in out and strict(out)[0]['f1_a'] is None


# --- exact ties ----------------------------------------------------------------------------------------------------

def records_file(path, recs):
    path.write_text(''.join(json.dumps(r.to_dict()) + '\n' for r in recs))
    return path


def tie_records():
    D = {'yes': [3869], 'no': [1939]}
    def rec(split, i, label, y, n):
        return Record(split, i, 'a.jpg', f'Is there a thing{i} in the image?', label, logits={3869: y, 1939: n, 3582: 0.0, 1217: 0.0},
                      derived=D, surface={'yes': [3869, 3582], 'no': [1939, 1217]}, greedy_id=3869 if y > n else 1939, text='Yes' if y > n else 'No')
    return [rec('adversarial', 1, 'no', 2.0, 2.0), rec('adversarial', 2, 'yes', 3.0, 1.0), rec('adversarial', 3, 'no', 1.0, 1.0),
            rec('popular', 1, 'yes', 0.5, 2.0), rec('popular', 2, 'no', 1.0, 1.0)]


def test_ties_counted_per_split_with_the_readouts_they_move(tmp_path, capsys):
    f = records_file(tmp_path/'records.jsonl', tie_records())
    code, out, err = run(capsys, 'score', f, '--json', '--boot', '0')
    assert code == 0, err
    r = strict(out)
    assert r['tie_rule'] == 'decoder'
    ties = {t['split']: (t['ties'], t['moved']) for t in r['ties']}
    # derived ties on adversarial 1, 3 and popular 2; two_token ties (0.0 vs 0.0) on every record; eight_token lacks
    # most of its ids here, so it is unknown under both rules
    assert ties == {'adversarial': (2, {'two_token': 3, 'derived': 2}), 'popular': (1, {'two_token': 2, 'derived': 1})}
    dec = {s['split']: s['tn'] for s in r['scores'] if s['readout'] == 'derived'}
    code, out, _ = run(capsys, 'score', f, '--json', '--boot', '0', '--ties', 'ge')
    ge = {s['split']: s['tn'] for s in strict(out)['scores'] if s['readout'] == 'derived'}
    assert dec['adversarial'] == 2 and ge['adversarial'] == 0          # the decoder says No on a tie (1939 < 3869); ge says yes
    code, out, _ = run(capsys, 'score', f, '--boot', '0')
    assert "exact ties (best yes logit = best no logit over the derived set), tie rule 'decoder'" in out
    assert 'two_token 3, derived 2' in out


def test_ties_rule_is_checked(tmp_path, capsys):
    f = records_file(tmp_path/'records.jsonl', tie_records())
    with pytest.raises(SystemExit) as e: main(['score', str(f), '--ties', 'le'])
    assert e.value.code == 2                                            # argparse refuses it


# --- joins are verified ---------------------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def a13(shared): return shared/'data/pope/llava/answers/llava-v1.5-13b.jsonl'


def test_adversarial_answers_against_the_random_file_are_refused(shared, tmp_path, capsys, a13):
    adv = tmp_path/'adv13.jsonl'
    adv.write_text(''.join(l for l in a13.open() if json.loads(l)['question_id'] < 10_000_000))
    code, out, err = run(capsys, 'score', adv, '--questions', shared/'data/pope/coco/coco_pope_random.json')
    assert code == 2 and out == ''
    assert 'adv13.jsonl:2: ' in err and 'coco_pope_random.json' in err and "question 2 of 'random'" in err
    assert "it asks about 'backpack', the question set asks about 'car'" in err


def test_llava_13b_scores_against_the_official_files_with_the_version_difference(shared, capsys, a13):
    code, out, err = run(capsys, 'score', a13, '--questions', shared/'data/pope/coco', '--splits', 'adversarial', 'popular',
                         '--json', '--boot', '0', '--readouts', 'pope_parse')
    assert code == 0, err
    r = strict(out)
    assert [f['version'] for f in r['fingerprint']] == [OFFICIAL_V] * 2
    assert {p['split']: (p['answers'], p['text_checked'], p['wording']) for p in r['pairings']} == {
        'adversarial': (3000, 3000, 58), 'popular': (3000, 3000, 44)}
    assert any('58 of 3000 adversarial' in n for n in r['notes']) and any('44 of 3000 popular' in n for n in r['notes'])
    f1 = {s['split']: s['f1'] for s in r['scores']}
    assert f1['adversarial'] == pytest.approx(2 * 1182 / (2 * 1182 + 117 + 318))


def test_llava_13b_random_split_is_another_question_set(shared, capsys, a13):
    "LLaVA's random split pairs with the official ids but asks about other objects: refused, naming both files."
    code, _, err = run(capsys, 'score', a13, '--questions', shared/'data/pope/coco')
    assert code == 2
    assert 'llava-v1.5-13b.jsonl:3018: ' in err and 'coco_pope_random.json' in err and "leave split 'random' out" in err


def test_llava_13b_scores_against_its_own_copy(shared, capsys, a13):
    code, out, err = run(capsys, 'score', a13, '--questions', shared/'data/pope/llava/llava_pope_test.jsonl',
                         '--labels', shared/'data/pope/llava/coco', '--json', '--boot', '0')
    assert code == 0, err
    r = strict(out)
    assert [f['version'] for f in r['fingerprint']] == [LLAVA_V] * 3 and r['notes'] == []
    assert {c['split']: (c['questions'], c['answered']) for c in r['coverage']} == {'adversarial': (3000, 3000), 'popular': (3000, 3000), 'random': (2910, 2910)}


def vlmeval_table(path, questions, wrong_image=None, own_names=False):
    rows = questions.assign(index=questions.question_id, answer=questions.label.str.capitalize(), prediction='Yes',
                            category=questions.split, image_path=questions.image)
    if own_names: rows['image_path'] = [f'/root/LMUData/images/POPE/{i}.jpg' for i in range(len(rows))]
    if wrong_image is not None:   # another image of the same question set
        rows.loc[wrong_image, 'image_path'] = next(i for i in questions.image if i != rows.loc[wrong_image, 'image_path'])
    rows[['index', 'question', 'answer', 'prediction', 'category', 'image_path']].to_csv(path, sep='\t', index=False)
    return path


def test_vlmevalkit_table_honours_questions(shared, tmp_path, capsys, pope):
    "Scored against --questions: coverage counts the question set, not the table's own rows."
    rnd = pope[pope.split == 'random']
    t = vlmeval_table(tmp_path/'POPE.tsv', rnd)
    llava = [shared/'data/pope/llava/llava_pope_test.jsonl', '--labels', shared/'data/pope/llava/coco']
    code, _, err = run(capsys, 'score', t, '--questions', *llava, '--boot', '0')
    assert code == 2 and 'POPE.tsv:' in err                             # the official random rows are not LLaVA's random questions
    code, out, err = run(capsys, 'score', t, '--questions', shared/'data/pope/coco', '--json', '--boot', '0')
    assert code == 0, err
    r = strict(out)
    assert {c['split']: (c['questions'], c['answered']) for c in r['coverage']} == {'adversarial': (3000, 0), 'popular': (3000, 0), 'random': (3000, 3000)}
    assert r['pairings'] == [dict(split='random', answers=3000, text_checked=3000, image_checked=3000, wording=0)]
    bad = vlmeval_table(tmp_path/'POPE_bad.tsv', rnd, wrong_image=rnd.index[5])
    code, _, err = run(capsys, 'score', bad, '--questions', shared/'data/pope/coco', '--boot', '0')
    assert code == 2 and "POPE_bad.tsv:7: field 'question'" in err and 'cannot be joined by image and question' in err
    own = vlmeval_table(tmp_path/'POPE_own.tsv', rnd, own_names=True)   # images saved under the tool's own names: no join by image
    code, out, err = run(capsys, 'score', own, '--questions', shared/'data/pope/coco', '--json', '--boot', '0')
    assert code == 2 and "POPE_own.tsv:2: field 'image_path'" in err and 'without --questions' in err
    code, out, err = run(capsys, 'score', own, '--json', '--boot', '0')
    assert code == 0 and "labels are the table's own answer column" in ' '.join(strict(out)['notes']), err


def test_lmms_log_checked_against_questions(shared, tmp_path, capsys, pope):
    from pope_audit.benchmarks.scoring import write_lmms_log
    adv = pope[pope.split == 'adversarial'].head(20)
    recs = [Record('adversarial', q.question_id, q.image, q.question + '\nAnswer the question using a single word or phrase.', q.label, text='Yes')
            for q in adv.itertuples()]
    recs[7].question = 'Is there a giraffe in the image?'
    f = tmp_path/'lmms.jsonl'
    write_lmms_log(recs, f)
    code, _, err = run(capsys, 'score', f, '--questions', shared/'data/pope/coco', '--boot', '0')
    assert code == 2 and "lmms.jsonl:8: field 'doc.question'" in err and "'giraffe'" in err


def test_records_joined_to_questions(shared, tmp_path, capsys):
    f = records_file(tmp_path/'records.jsonl', tie_records())
    code, _, err = run(capsys, 'score', f, '--questions', shared/'data/pope/coco', '--boot', '0')
    assert code == 2 and "records.jsonl:1: field 'question'" in err and 'coco_pope_adversarial.json' in err


def test_two_files_for_one_split_are_refused(shared, tmp_path, capsys):
    extra = tmp_path/'coco_pope_random.json'
    extra.write_text(json.dumps(dict(question_id=3001, image='a.jpg', text='Is there a cat in the image?', label='yes')) + '\n')
    code, _, err = run(capsys, 'score', tmp_path/'x.csv', '--questions', shared/'data/pope/coco', extra)
    assert code == 2 and "split 'random' comes from two files" in err


def test_fingerprint_from_ids_and_labels(pope, tmp_path, capsys):
    "Official adversarial/popular and LLaVA's copy have the same id/label sequences: say both, guess neither."
    t = pope[pope.split.isin(['adversarial', 'popular'])][['split', 'question_id', 'label']].assign(pred=lambda d: d.label)
    t.to_csv(tmp_path/'p.csv', index=False)
    code, out, err = run(capsys, 'score', tmp_path/'p.csv', '--json', '--boot', '0')
    assert code == 0, err
    v = {f['split']: f['version'] for f in strict(out)['fingerprint']}
    assert 'consistent with: ' in v['popular'] and OFFICIAL_V in v['popular'] and LLAVA_V in v['popular']
    assert OFFICIAL_V in v['adversarial'] and LLAVA_V in v['adversarial'] and 'unknown' not in v['adversarial']
    # LLaVA's file-wide ids (popular = 20000001...) are taken back to per-split ids first
    t.assign(question_id=[q + 20_000_000 if s == 'popular' else q for s, q in zip(t.split, t.question_id)]).to_csv(tmp_path/'w.csv', index=False)
    code, out, _ = run(capsys, 'score', tmp_path/'w.csv', '--json', '--boot', '0')
    assert {f['split']: f['version'] for f in strict(out)['fingerprint']} == v


def test_llava_predictions_table_with_file_wide_ids(shared, tmp_path, capsys):
    "LLaVA-1.5-13B's decisions as a predictions table with LLaVA's own ids and no split column."
    from pope_audit.foundation.data import read_llava_questions
    from pope_audit.benchmarks.scoring import read_llava_answers, predictions
    q = read_llava_questions(shared/'data/pope/llava/llava_pope_test.jsonl', shared/'data/pope/llava/coco')
    p = predictions(read_llava_answers(shared/'data/pope/llava/answers/llava-v1.5-13b.jsonl', q), ['pope_parse'])
    p.drop(columns='split').to_csv(tmp_path/'p13.csv', index=False)
    code, out, err = run(capsys, 'score', tmp_path/'p13.csv', '--json', '--boot', '0')
    assert code == 0, err
    v = {f['split']: f['version'] for f in strict(out)['fingerprint']}
    assert v['random'] == f'consistent with: {LLAVA_V} (from ids and labels only)'
    assert OFFICIAL_V in v['popular'] and LLAVA_V in v['popular'] and 'unknown' not in v['popular']
    code, out, err = run(capsys, 'score', tmp_path/'p13.csv', '--questions', shared/'data/pope/coco', '--splits', 'adversarial', 'popular',
                         '--json', '--boot', '0')
    assert code == 0, err
    r = strict(out)
    assert {s['split']: (s['tp'], s['fp'], s['tn'], s['fn']) for s in r['scores'] if s['split'] in ('adversarial', 'popular')} == {
        'adversarial': (1182, 117, 1383, 318), 'popular': (1182, 59, 1441, 318)}
    assert [f['version'] for f in r['fingerprint']] == [OFFICIAL_V] * 2
    assert [n[:45] for n in r['notes']] == ['unverified: the 3000 adversarial answers carr', 'unverified: the 3000 popular answers carry no']
