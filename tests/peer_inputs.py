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
