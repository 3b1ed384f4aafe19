"""Run the ORIGINAL mPLUG-Owl2 model (transformers 4.31) on a tiny random configuration and save a fixture.

Run inside the reference virtualenv (see make_fixture.sh): python make_fixture.py <checkout>/mPLUG-Owl2 <out dir>.
Writes into <out dir>:
  config.json          the original's MPLUGOwl2Config (tiny), as `save_pretrained` would write it
  model.safetensors    the original's state dict (fp32), keys exactly as the released checkpoint names them
  io.safetensors       inputs (input_ids with -200, pixel_values) and outputs: logits at every position, eager
                       attentions of every layer, the modality indicators, and the logits of a cached-prefix run
  names_7b.json        [name, shape] of every state-dict entry of the original at the real 7B configuration
  meta.json            versions and the prefix split used
"""
import json, sys, os
import torch, numpy as np, transformers
from safetensors.torch import save_file

src, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, src)
from mplug_owl2.model.modeling_mplug_owl2 import MPLUGOwl2LlamaForCausalLM  # noqa: E402
from mplug_owl2.model.configuration_mplug_owl2 import (MPLUGOwl2Config, MplugOwlVisionConfig,  # noqa: E402
                                                       MplugOwlVisualAbstractorConfig)
from mplug_owl2.constants import IMAGE_TOKEN_INDEX  # noqa: E402

torch.manual_seed(0)
# Widths are multiples of 64 so that bitsandbytes' CPU 4-bit kernels accept them; 28-pixel images in 7-pixel
# patches give the abstractor a 4x4 grid (+ CLS), the same code path as 448/14 = 32x32 at a fraction of the size.
vis = MplugOwlVisionConfig(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=28, patch_size=7).to_dict()
abs_ = MplugOwlVisualAbstractorConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, encoder_hidden_size=64, grid_size=4,
                                      num_learnable_queries=64).to_dict()
cfg = MPLUGOwl2Config(visual_config={'visual_model': vis, 'visual_abstractor': abs_}, vocab_size=256,
                      hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      max_position_embeddings=256, rms_norm_eps=1e-5)
model = MPLUGOwl2LlamaForCausalLM(cfg).eval()

# Random values everywhere (the default init leaves norms at one and would hide swapped branches).
g = torch.Generator().manual_seed(1)
with torch.no_grad():
    for n, p in sorted(model.named_parameters()):
        if p.ndim == 1 and ('norm' in n or 'ln' in n) and n.endswith('weight'):
            p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
        elif p.ndim == 1:
            p.copy_(0.1 * torch.randn(p.shape, generator=g))
        elif n.endswith('embed_tokens.weight') or p.ndim == 3:
            p.copy_(torch.randn(p.shape, generator=g))
        else:
            fan_in = p[0].numel()
            p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)

# The prompt: <s> USER : ▁ <|image|> question ... ASSISTANT :   (ids are arbitrary in the tiny vocab)
pre = [1, 45, 67, 89]
post = (torch.randint(3, 256, (12,), generator=g)).tolist()
ids = torch.tensor([pre + [IMAGE_TOKEN_INDEX] + post])
pixel_values = torch.randn(1, 3, 28, 28, generator=g)

with torch.no_grad():
    o = model(input_ids=ids, images=pixel_values, output_attentions=True, use_cache=True, return_dict=True)
    split = len(pre) + 1
    p = model(input_ids=ids[:, :split], images=pixel_values, use_cache=True, return_dict=True)
    s = model(input_ids=ids[:, split:], images=None, past_key_values=p.past_key_values, use_cache=True,
              return_dict=True)
    _, mod, *_ = model.prepare_inputs_labels_for_multimodal(ids, None, None, None, pixel_values)

# The original image pipeline (`process_images`, 'resize' mode: stretch to a square, then CLIP) on a small synthetic
# image, at the tiny 28 px size so the stored tensor stays small.
from PIL import Image  # noqa: E402
from transformers import CLIPImageProcessor  # noqa: E402
from mplug_owl2.mm_utils import process_images  # noqa: E402
rgb = (np.arange(30 * 40 * 3).reshape(30, 40, 3) * 7 % 256).astype(np.uint8)
proc = CLIPImageProcessor(size={'shortest_edge': 28}, crop_size={'height': 28, 'width': 28})
image_pixels = process_images([Image.fromarray(rgb)], proc)

tensors = {'input_ids': ids, 'image_rgb': torch.from_numpy(rgb), 'image_pixels': image_pixels, 'pixel_values': pixel_values, 'logits': o.logits.float(),
           'attentions': torch.stack([a.float() for a in o.attentions]), 'modality_indicators': mod,
           'suffix_logits': s.logits.float()}
save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out, 'io.safetensors'))
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(out, 'model.safetensors'))
cfg.architectures = [type(model).__name__]   # as the model's save_pretrained (and the released config.json) has it
cfg.save_pretrained(out)

# The full parameter-name list at the real 7B configuration (LLaMA-2-7B widths, the default visual config),
# built on the meta device so no memory is used.
cfg7 = MPLUGOwl2Config(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, max_position_embeddings=4096, rms_norm_eps=1e-5)
with torch.device('meta'):
    big = MPLUGOwl2LlamaForCausalLM(cfg7)
names = [[n, list(t.shape)] for n, t in big.state_dict().items()]
json.dump(names, open(os.path.join(out, 'names_7b.json'), 'w'))
json.dump({'torch': torch.__version__, 'transformers': transformers.__version__, 'numpy': np.__version__,
           'split': split, 'seq_len': int(o.logits.shape[1]),
           'params_7b': sum(int(np.prod(s)) for _, s in names)},
          open(os.path.join(out, 'meta.json'), 'w'), indent=1)
print('logits', tuple(o.logits.shape), 'attn', tuple(tensors['attentions'].shape), 'names_7b', len(names),
      'cached-vs-full', float((s.logits[0, -1] - o.logits[0, -1]).abs().max()))
