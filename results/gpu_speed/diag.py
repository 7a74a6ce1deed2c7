import cProfile, pstats, sys, time, tempfile
import torch
sys.path.insert(0, "scripts/gpu")
from qrag.training.data.text_pack import maybe_install_text_pack
maybe_install_text_pack()
from transformers import AutoModel, AutoTokenizer
from qrag.training.encoders import resolve_encoder
from qrag.training.data import load_episodes
path = resolve_encoder("sentence-transformers/all-MiniLM-L6-v2")
tok = AutoTokenizer.from_pretrained(path); model = AutoModel.from_pretrained(path).eval().cuda()
print("attn impl", model.config._attn_implementation, "dtype", next(model.parameters()).dtype)
ep = load_episodes("babilong", task="qa2", split="test", num_samples=1, seed=0, num_sentences=50000)[0]
texts = list(ep.chunks)
def s(): torch.cuda.synchronize()
t=time.perf_counter(); enc = tok(texts, truncation=True, max_length=32, padding=True, return_tensors="pt"); print("tokenize all padded %.3f s" % (time.perf_counter()-t), enc["input_ids"].shape)
for bs in (1024, 4096):
    batches = [{k: v[i:i+bs].cuda() for k, v in enc.items()} for i in range(0, len(texts), bs)]
    for name, ctx, m in (("fp32", torch.autocast("cuda", enabled=False), model), ("bf16-autocast", torch.autocast("cuda", dtype=torch.bfloat16), model)):
        with torch.inference_mode(), ctx:
            for b in batches[:2]: m(**b)
            s(); t=time.perf_counter()
            for b in batches: m(**b).last_hidden_state
            s(); dt=time.perf_counter()-t
        print(f"bs {bs} {name}: forward only {len(texts)/dt:.0f} chunks/s")
    mh = AutoModel.from_pretrained(path, dtype=torch.bfloat16).eval().cuda()
    with torch.inference_mode():
        for b in batches[:2]: mh(**b)
        s(); t=time.perf_counter()
        for b in batches: mh(**b).last_hidden_state
        s(); dt=time.perf_counter()-t
    print(f"bs {bs} bf16 weights: forward only {len(texts)/dt:.0f} chunks/s")
    with torch.inference_mode():
        s(); t=time.perf_counter()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
            for b in batches[:4]: mh(**b).last_hidden_state
            s()
    if bs == 1024:
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))
# training profile
from qrag.training.config import load_preset
from qrag.training.data.build import build_episodes
from qrag.training.trainer import Trainer
config = load_preset("babilong-cpu")
config.data.num_train, config.data.num_val = 200, 1
config.trainer.num_envs = 64; config.trainer.cpu = False; config.trainer.output_dir = tempfile.mkdtemp()
train, _ = build_episodes(config.data)
tr = Trainer(config, train)
with tr.accelerator.autocast():
    tr.chunk_cache.vectors(tr.online, [c for e in train for c in e.chunks])
tr.update(tr.collect_rollout())
pr = cProfile.Profile(); pr.enable(); t=time.perf_counter()
for _ in range(2):
    b = tr.collect_rollout(); tr.update(b)
s(); pr.disable(); print("2 rollouts %.2f s" % (time.perf_counter()-t))
pstats.Stats(pr).sort_stats("tottime").print_stats(30)
