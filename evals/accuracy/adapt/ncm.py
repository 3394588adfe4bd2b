"""Prototype head, k-shot: MNIST digits learnt by the frozen Fashion-MNIST body (the transfer
CNN), embeddings from its last pooling layer (3x3x32 values). Per seed, k training images of each digit (drawn
by the seed) make the prototypes; accuracy on the 1,000 test images. The same method runs on
the device (micropython), in numpy on the oracle's int8 embeddings (adapt_ref.ProtoRef), and
in PyTorch float32 on the float model's fc1 output (float means, the same metric)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray

from evals.accuracy.adapt.common import device, mtd
from evals.lib import datasets as ds
from evals.lib import experiments as ex
from evals.lib import transfer_model as tm
from microtrain_tools import mtm
from microtrain_tools.reference import adapt_ref as ar
from microtrain_tools.reference import train_ref as tr

LAYER = "pool#3"  # the body's features: few-shot prototypes separate better there than after fc1


def torch_embed(module: torch.nn.Module, x: NDArray[np.float32], layer: str) -> NDArray[np.float32]:
    """The float transfer CNN's (eval mode) output of `layer` ("pool#3": the flattened features,
    "fc1": relu(fc1(.))), as the int8 model's (NCHW order: NCM does not depend on it)."""
    m = module.eval()
    with torch.no_grad():
        t = torch.from_numpy(x)
        t = m.pool(F.relu(m.bn1(m.conv1(t))))
        t = m.pool(F.relu(m.bn2(m.conv2(t))))
        t = F.relu(m.bn3(m.dw(t)))
        t = m.pool(F.relu(m.bn4(m.pw(t))))
        t = torch.flatten(t, 1)
        return (t if layer == "pool#3" else F.relu(m.fc1(t))).numpy()


def torch_ncm(emb_shots: NDArray[np.float32], y_shots: NDArray[np.int64], emb_test: NDArray[np.float32],
              metric: str) -> NDArray[np.int64]:
    classes = np.unique(y_shots)
    protos = np.stack([emb_shots[y_shots == c].mean(axis=0) for c in classes])
    if metric == "cosine":
        a = emb_test / np.maximum(np.linalg.norm(emb_test, axis=1, keepdims=True), 1e-12)
        p = protos / np.maximum(np.linalg.norm(protos, axis=1, keepdims=True), 1e-12)
        sc = a @ p.T
    else:
        sc = -((emb_test[:, None, :] - protos[None]) ** 2).sum(-1)
    return classes[sc.argmax(1)]


_TEST_EMB: dict[tuple[str, str], NDArray[np.int8]] = {}


def run(seeds: list[int], shots: int = 5, metric: str = "cosine", dtype: str = "int8",
        layer_name: str = LAYER, echo: bool = False) -> dict[str, Any]:
    ref = tm.get_model(progress=False)
    xtr, ytr, xte, yte = ds.mnist5k_split(seed=0)
    qtr, qte = ex.quantize(ref.mtm, xtr), ex.quantize(ref.mtm, xte)
    test = mtd("ncm_test", qte, yte)
    m = mtm.load(ref.mtm)
    layer = [ly.name for ly in m.layers].index(layer_name)
    zp = m.tensors[m.layers[layer].output].zero_point
    oracle = tr.RefTrainer(m, "last:1")
    out_t = m.layers[layer].output
    key = (str(ref.mtm), layer_name)
    if key not in _TEST_EMB:  # the oracle's test embeddings (a minute): once per run of adapt-eval
        _TEST_EMB[key] = np.stack([oracle.forward(q)[out_t] for q in qte])
    e_test = _TEST_EMB[key]
    f_test = torch_embed(ref.model, xte, layer_name)
    res: dict[str, Any] = {"seeds": {}}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        idx = np.concatenate([rng.choice(np.flatnonzero(ytr == c), shots, replace=False) for c in range(10)])
        shot_file = mtd(f"ncm_shots{shots}_s{seed}", qtr[idx], ytr[idx])
        dev = device({"kind": "ncm", "model": str(ref.mtm), "layer": layer_name, "metric": metric,
                      "dtype": dtype,
                      "shots": str(shot_file), "test": str(test)}, f"ncm{shots}_s{seed}", echo)
        pr = ar.ProtoRef(zp, metric, dtype)
        for c in range(10):
            pr.add_class(str(c), np.stack([oracle.forward(q)[out_t] for q in qtr[idx][ytr[idx] == c]]))
        ref_pred = np.array([int(pr.predict(e)) for e in e_test])
        t_pred = torch_ncm(torch_embed(ref.model, xtr[idx], layer_name), ytr[idx], f_test, metric)
        r = {"device": dev["acc"], "numpy": float((ref_pred == yte).mean()),
             "torch": float((t_pred == yte).mean()),
             "same_predictions": bool((np.array(dev["preds"]) == ref_pred).all()),
             "head_bytes": dev["head_bytes"], "predict_ms": dev["predict_ms"]}
        res["seeds"][seed] = r
        if echo:
            print(f"  ncm seed {seed}: device {r['device']:.4f} numpy {r['numpy']:.4f} "
                  f"torch {r['torch']:.4f} "
                  f"same predictions {r['same_predictions']}", flush=True)
    s = list(res["seeds"].values())
    res["acc"] = float(np.mean([v["device"] for v in s]))
    res["numpy"] = float(np.mean([v["numpy"] for v in s]))
    res["torch"] = float(np.mean([v["torch"] for v in s]))
    return res
