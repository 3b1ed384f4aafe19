"Inputs in each peer tool's own layout, built from the real LLaVA answers in the shared folder (used by the tests and by the reference script that ran the peers' code)."
import json
from pathlib import Path
import pandas as pd

SPLIT_TASK = {'adversarial': 'pope_adv', 'popular': 'pope_pop', 'random': 'pope_random'}
POST_PROMPT = '\nAnswer the question using a single word or phrase.'
# answers that are not a bare yes or no; {obj} is the object the question asks about
PERTURBATIONS = ['Yes.', 'yes', 'Yes, there is a {obj} in the image.', ' Yes ', 'There is not a {obj} in the image.',
                 'I am not sure.', 'Yes and no.', 'YES!', '']


def llava_questions(shared):
    "LLaVA's 8,910 questions with labels, in file order: split, question_id (file-wide), image, text, label."
    root = Path(shared)/'data/pope/llava'
    labels = {}
    for s in SPLIT_TASK:
        for l in open(root/f'coco/coco_pope_{s}.json'): o = json.loads(l); labels[s, o['question_id']] = o['label']
    rows = []
    for l in open(root/'llava_pope_test.jsonl'):
        o = json.loads(l); s = o['category']
        rows.append(dict(split=s, question_id=o['question_id'], image=o['image'], text=o['text'].replace(POST_PROMPT, ''),
                         label=labels[s, o['question_id'] % 10_000_000]))
    return pd.DataFrame(rows)


def llava_answers(shared, model='13b'):
    "The real LLaVA-1.5 answers (`13b` or `7b`) as a list of LLaVA answer objects."
    name = 'llava-v1.5-13b.jsonl' if model == '13b' else 'llava-v1.5-7b.partial.jsonl'
    return [json.loads(l) for l in open(Path(shared)/'data/pope/llava/answers'/name)]


def perturbed(answers, questions):
    "A copy of `answers` where every 10th answer is replaced, in turn, by one of `PERTURBATIONS`."
    obj = {q.question_id: q.text.removeprefix('Is there a ').removeprefix('Is there an ').removesuffix(' in the image?')
           for q in questions.itertuples()}
    out = []
    for i, a in enumerate(answers):
        a = dict(a)
        if i % 10 == 0: a['text'] = PERTURBATIONS[(i // 10) % len(PERTURBATIONS)].format(obj=obj[a['question_id']])
        out.append(a)
    return out


def write_llava(answers, path):
    Path(path).write_text(''.join(json.dumps(a) + '\n' for a in answers))
    return path


def _joined(answers, questions):
    text = {a['question_id']: a['text'] for a in answers}
    return questions[questions.question_id.isin(text)].assign(pred=lambda t: t.question_id.map(text))


def write_lmms(answers, questions, folder, layout='0.4'):
    "lmms-eval `--log_samples` files, one per task: `0.4` (jsonl, no doc, doc_id = position in the split) or `0.2` ({task}.json with `logs`)."
    folder = Path(folder); folder.mkdir(parents=True, exist_ok=True)
    t = _joined(answers, questions)
    paths = []
    for s, g in t.groupby('split', sort=False):
        pos = {qid: i for i, qid in enumerate(questions[questions.split == s].question_id)}
        logs = []
        for q in g.itertuples():
            pred = q.pred.lower().strip()
            m = dict(question_id=str(q.question_id), score=float(pred == q.label), prediction=pred, ground_truth=q.label)
            o = dict(doc_id=pos[q.question_id], target=q.label, resps=[[q.pred]], filtered_resps=[q.pred],
                     **{k: m for k in ('pope_accuracy', 'pope_precision', 'pope_recall', 'pope_f1_score', 'pope_yes_ratio')})
            if layout == '0.4': o['input'] = q.text + POST_PROMPT
            else: o['doc'] = dict(question_id=str(q.question_id), question=q.text, answer=q.label, image_source=q.image.removesuffix('.jpg'), category=s)
            logs.append(o)
        if layout == '0.4':
            p = folder/f'20250101_120000_samples_{SPLIT_TASK[s]}.jsonl'
            p.write_text(''.join(json.dumps(o) + '\n' for o in logs))
        else:
            p = folder/f'{SPLIT_TASK[s]}.json'
            p.write_text(json.dumps(dict(args={}, model_configs={}, logs=logs, time='20240101-120000'), indent=2))
        paths.append(p)
    return paths


def vlmeval_table(answers, questions):
    "VLMEvalKit's own POPE layout: one row per distinct (image, question), splits comma-joined in `category`, `index` a row number."
    t = _joined(answers, questions)
    rows = {}
    for q in t.itertuples():
        k = (q.image, q.text)
        if k in rows: rows[k]['category'] += f',{q.split}'
        else: rows[k] = dict(question=q.text, answer=q.label.capitalize(), category=q.split, image_path=q.image, prediction=q.pred)
    df = pd.DataFrame(list(rows.values()))
    return df.assign(index=range(len(df)))[['index', 'question', 'answer', 'category', 'image_path', 'prediction']]


def write_line_aligned(answers, questions, split, path):
    "The paper's package's predictions: one answer per line, in the order of the split's POPE file."
    text = {a['question_id']: a['text'] for a in answers}
    qs = questions[questions.split == split]
    Path(path).write_text(''.join(text[q] + '\n' for q in qs.question_id))
    return path


# AMBER and NaturalBench in the peers' layouts. The answer to question j is the label, but every fifth one is, in turn, one of
# these shapes, so that AMBER's exact rule, VLMEvalKit's YOrN_Extraction and NaturalBench's extract_answer read them differently.
SHAPES = ['yes', 'No.', 'Yes, it is.', 'There is no {w}.', 'I am not sure.', 'Yes and no.', 'NO', '', 'Not really, yes.']


def shaped(j, label, question=''):
    "The answer to question j: the label (Yes/No), or every fifth one a shape from `SHAPES`."
    if j % 5: return label.capitalize()
    return SHAPES[(j // 5) % len(SHAPES)].format(w=(question.split() or ['it'])[-1].strip('?'))


def amber_vlmeval_table(shared):
    "A VLMEvalKit AMBER result table, as its AMBER.tsv rows (index, question, answer, category = AMBER's type string, image_path) plus prediction."
    root = Path(shared)/'data/amber'
    ann = json.loads((root/'annotations.json').read_text())
    rows = [dict(index=j, question=o['query'], answer=ann[o['id'] - 1]['truth'], category=ann[o['id'] - 1]['type'], image_path=o['image'],
                 prediction=shaped(j, ann[o['id'] - 1]['truth'], o['query']))
            for j, o in enumerate(json.loads((root/'query_discriminative.json').read_text()))]
    return pd.DataFrame(rows)


def amber_lmms_log(shared, path):
    "lmms-eval's amber_g `--log_samples` lines for AMBER's discriminative questions (doc: question_id, task_type, text, truth), responses `shaped`."
    root = Path(shared)/'data/amber'
    ann = json.loads((root/'annotations.json').read_text())
    with open(path, 'w') as f:
        for j, o in enumerate(json.loads((root/'query_discriminative.json').read_text())):
            a, r = ann[o['id'] - 1], shaped(j, ann[o['id'] - 1]['truth'], o['query'])
            doc = dict(question_id=o['id'], task_type=a['type'], text=o['query'], truth=a['truth'], hallu=[])
            f.write(json.dumps(dict(doc_id=j, doc=doc, target=a['truth'], arguments=[], resps=[[r]], filtered_resps=[r])) + '\n')
    return path


NB_SUFFIX = 'Please answer Yes or No.'


def naturalbench_vlmeval_table(shared, yes_no_only=False):
    "A VLMEvalKit NaturalBench result table built from the fine-tuning test split (not the benchmark proper): index (item position), question (no suffix), answer, type, prediction."
    items = json.loads((Path(shared)/'data/naturalbench/test_set.json').read_text())
    rows = [dict(index=j, question=o[0].removesuffix(NB_SUFFIX) if o[3] == 'yes_no' else o[0], answer=o[2],
                 type='yes_no' if o[3] == 'yes_no' else 'multiple_choice',
                 prediction=shaped(j, o[2], o[0]) if o[3] == 'yes_no' else o[2]) for j, o in enumerate(items)]
    t = pd.DataFrame(rows)
    return t[t.type == 'yes_no'] if yes_no_only else t
