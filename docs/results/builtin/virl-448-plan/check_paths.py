"""Loss of the pilot model on its own training samples through the processor path (the eval's), vs the
tensor engine's training log: a large gap means the two paths feed the model different inputs."""
import sys

import torch
from transformers import AutoModelForImageTextToText

from spatialrl.models.processor import load_processor
from spatialrl.train.data import SFTDataset
from spatialrl.train.sft import Collator, token_loss

model_dir, data = sys.argv[1], sys.argv[2]
model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
collate = Collator(load_processor(model_dir), model.config.model_type, None)
ds = SFTDataset(data)
idx = list(range(0, len(ds), max(1, len(ds) // 48)))[:48]
tot = n = 0.0
with torch.no_grad():
    for i in range(0, len(idx), 8):
        batch = collate([ds[j] for j in idx[i:i + 8]])
        if i == 0:
            print({k: tuple(v.shape) for k, v in batch.items() if hasattr(v, "shape")})
        ls, c, _ = token_loss(model, batch)
        tot, n = tot + ls.item(), n + c.item()
print(model_dir, "processor-path token loss", tot / n)
