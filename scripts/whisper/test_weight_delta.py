"""weight_delta.py: a delta made from a model rebuilds it from its base, and
a base it was not made against is refused.

    python3 -m unittest discover -s scripts/whisper -p 'test_*.py'
"""
import json
import lzma
import os
import tempfile
import unittest

import numpy as np

import weight_delta as wd


def folder(path, tensors, config):
    os.makedirs(path, exist_ok=True)
    blob = wd.safetensors_bytes({k: ("F16", list(v.shape), v.astype(np.float16).tobytes())
                                 for k, v in tensors.items()})
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(blob)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        f.write("{}")


def tensors(path):
    return {k: np.frombuffer(b, np.float16).reshape(shape).astype(np.float64)
            for k, (_, shape, b) in wd.load(os.path.join(path, "model.safetensors")).items()}


class WeightDelta(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        rng = np.random.default_rng(7)
        self.base = {"w": rng.normal(0, 0.05, (128, 96)), "bias": rng.normal(0, 0.1, (96,)),
                     "same": rng.normal(0, 1, (64, 64))}
        self.model = dict(self.base, w=self.base["w"] + rng.normal(0, 0.01, (128, 96)),
                          bias=self.base["bias"] + 0.5)
        # a row whose delta is zero: its scale is 0, and nothing may divide by it
        self.model["w"][3] = self.base["w"][3]
        self.dirs = {n: os.path.join(self.tmp.name, n) for n in ("base", "model", "delta", "out")}
        folder(self.dirs["base"], self.base, {"d_model": 96})
        folder(self.dirs["model"], self.model, {"d_model": 96, "pulsed_encoder_context": {"chunk": 16}})
        wd.make(self.dirs["base"], self.dirs["model"], self.dirs["delta"], "tiny-base")

    def tearDown(self):
        self.tmp.cleanup()

    def test_rebuilds_the_model_from_its_base(self):
        wd.apply(self.dirs["base"], self.dirs["delta"], self.dirs["out"])
        got, want = tensors(self.dirs["out"]), tensors(self.dirs["model"])
        self.assertEqual(sorted(got), sorted(want))
        np.testing.assert_array_equal(got["bias"], want["bias"])  # stored whole
        np.testing.assert_array_equal(got["same"], want["same"])  # unchanged, not stored
        np.testing.assert_array_equal(got["w"][3], want["w"][3])
        with open(os.path.join(self.dirs["delta"], wd.DELTA), "rb") as f:
            stored = wd.read_safetensors(lzma.decompress(f.read()))
        # values 320..383 (row 3's second half) are a group of their own, all unchanged: scale 0
        q = np.frombuffer(stored["w.q"][2], np.int8)
        self.assertTrue(np.all(q[3 * 96:4 * 96] == 0))
        self.assertEqual(np.frombuffer(stored["w.scale"][2], np.float16)[5], 0)
        d = want["w"] - self.base["w"].astype(np.float16)
        # within half a step of 1/LEVELS of each group's largest change, plus f16's rounding
        step = np.abs(d.reshape(-1, wd.GROUP)).max(1, keepdims=True) / wd.LEVELS
        bound = (step * 0.51 + np.abs(want["w"].reshape(-1, wd.GROUP)) * 2 ** -11).reshape(want["w"].shape)
        self.assertTrue(np.all(np.abs(got["w"] - want["w"]) <= bound))
        self.assertGreater(np.abs(got["w"] - self.base["w"]).max(), 0.01)
        cfg = wd.read_json(os.path.join(self.dirs["out"], "config.json"))
        self.assertEqual(cfg, {"d_model": 96, "pulsed_encoder_context": {"chunk": 16}})
        self.assertTrue(os.path.isfile(os.path.join(self.dirs["out"], "tokenizer.json")))
        meta = wd.read_json(os.path.join(self.dirs["delta"], wd.META))
        self.assertEqual(meta["base"], "tiny-base")
        with open(os.path.join(self.dirs["delta"], wd.DELTA), "rb") as f:
            stored = wd.read_safetensors(lzma.decompress(f.read()))
        self.assertEqual(sorted(stored), ["bias", "w.q", "w.scale"])

    def test_a_second_config_shares_the_weights(self):
        other = os.path.join(self.tmp.name, "other")
        os.makedirs(other)
        meta = wd.read_json(os.path.join(self.dirs["delta"], wd.META))
        meta["weights"] = os.path.join("..", "delta", wd.DELTA)
        meta["config"] = {"pulsed_encoder_context": {"chunk": 8}}
        with open(os.path.join(other, wd.META), "w") as f:
            json.dump(meta, f)
        wd.apply(self.dirs["base"], other, self.dirs["out"])
        got, want = tensors(self.dirs["out"]), tensors(self.dirs["model"])
        self.assertLess(np.abs(got["w"] - want["w"]).max(), 1e-3)
        cfg = wd.read_json(os.path.join(self.dirs["out"], "config.json"))
        self.assertEqual(cfg["pulsed_encoder_context"], {"chunk": 8})

    def test_a_key_the_model_drops_stays_dropped(self):
        folder(self.dirs["base"], self.base, {"d_model": 96, "suppress_tokens": [1, 2]})
        wd.make(self.dirs["base"], self.dirs["model"], self.dirs["delta"], "tiny-base")
        meta = wd.read_json(os.path.join(self.dirs["delta"], wd.META))
        self.assertEqual(meta["config_removed"], ["suppress_tokens"])
        wd.apply(self.dirs["base"], self.dirs["delta"], self.dirs["out"])
        cfg = wd.read_json(os.path.join(self.dirs["out"], "config.json"))
        self.assertEqual(cfg, {"d_model": 96, "pulsed_encoder_context": {"chunk": 16}})
        meta["config_removed"] = "suppress_tokens"
        with open(os.path.join(self.dirs["delta"], wd.META), "w") as f:
            json.dump(meta, f)
        with self.assertRaises(wd.DeltaError):
            wd.apply(self.dirs["base"], self.dirs["delta"], self.dirs["out"])

    def test_refuses_another_base(self):
        other = dict(self.base, same=self.base["same"] + 1e-2)
        folder(self.dirs["base"], other, {"d_model": 96})
        with self.assertRaisesRegex(wd.DeltaError, "do not match"):
            wd.apply(self.dirs["base"], self.dirs["delta"], self.dirs["out"])
        self.assertFalse(os.path.exists(os.path.join(self.dirs["out"], "model.safetensors")))

    def test_refuses_a_base_of_other_shapes(self):
        folder(self.dirs["base"], dict(self.base, w=np.zeros((96, 96))), {"d_model": 96})
        with self.assertRaisesRegex(wd.DeltaError, "does not fit"):
            wd.apply(self.dirs["base"], self.dirs["delta"], self.dirs["out"])

    def test_a_truncated_base_is_a_typed_error(self):
        path = os.path.join(self.dirs["base"], "model.safetensors")
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 100)
        with self.assertRaisesRegex(wd.DeltaError, "not a whole safetensors file"):
            wd.apply(self.dirs["base"], self.dirs["delta"], self.dirs["out"])

    def test_the_command_line_says_why_in_one_line(self):
        import subprocess
        import sys
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "weight_delta.py")
        r = subprocess.run([sys.executable, script, "apply", self.dirs["base"], os.path.join(self.tmp.name, "none"),
                            self.dirs["out"]], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("delta.json", r.stderr)

    def test_a_damaged_delta_is_a_typed_error(self):
        with open(os.path.join(self.dirs["delta"], wd.DELTA), "r+b") as f:
            f.seek(40)
            f.write(b"\xff" * 16)
        with self.assertRaises(wd.DeltaError):
            wd.apply(self.dirs["base"], self.dirs["delta"], self.dirs["out"])


if __name__ == "__main__":
    unittest.main()
