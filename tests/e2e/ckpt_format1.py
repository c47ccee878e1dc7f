#!/usr/bin/python3
"""Turns a copy of an mpitron checkpoint into a format-1 file, as an older mpitron wrote it: the
tensors' checksums recomputed with format 1's hash and format_version = 1 (nothing else differs).
Tests check that a current mpitron still verifies and resumes such files.
usage: ckpt_format1.py SRC.h5 DST.h5"""
import os
import shutil
import sys

import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_checksum import tensor_checksum

src, dst = sys.argv[1:]
shutil.copyfile(src, dst)
with h5py.File(dst, "r+") as f:
    assert int(f.attrs["format_version"]) == 2, "not a format-2 checkpoint"
    f.attrs["format_version"] = f.attrs["format_version"].dtype.type(1)  # the same attribute type

    def redo(name, obj):
        if isinstance(obj, h5py.Dataset) and "checksum" in obj.attrs:
            obj.attrs["checksum"] = obj.attrs["checksum"].dtype.type(tensor_checksum(obj[()], 1))
    f.visititems(redo)
print(f"{dst}: format 1")
