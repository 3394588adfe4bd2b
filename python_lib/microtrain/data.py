# Data helpers: samples are (x, label) with x an int8 buffer in the model's
# input layout (NHWC). A FileDataset streams them from flash or disk so a
# data set larger than the heap can be trained on.
import struct

MAGIC = b"MTDS"


class FileDataset:
    """Samples stored in a .mtd file, read one at a time into one buffer.

    Layout (little-endian): b"MTDS", u32 n, u32 numel, u32 0, then n records
    of [u8 label][numel int8 values]. Write them with
    `microtrain_tools.mtd.write_mtd` on the host or `FileDataset.write`.
    x from __getitem__ is reused by the next call (copy to keep)."""

    def __init__(self, path):
        self.path = path
        try:
            f = self._f = open(path, "rb")
        except OSError as e:  # the port's message names no path
            from microtrain.checkpoint import os_error

            raise os_error(e, "FileDataset", path) from None
        try:
            head = f.read(16)
            if len(head) != 16 or head[:4] != MAGIC:
                raise ValueError("FileDataset: %s is not a .mtd file" % path)
            self.n, self.numel, _ = struct.unpack("<III", head[4:])
            size = f.seek(0, 2)  # the records must be there: the header's count is not trusted
            if size is None:
                size = f.tell()
            want = 16 + self.n * (1 + self.numel)
            if (self.n and not self.numel) or size != want:
                raise ValueError("FileDataset: %s: the header says %d records of %d values (%d bytes), the "
                                 "file has %d bytes (truncated or not a .mtd file)" %
                                 (path, self.n, self.numel, want, size))
        except BaseException:
            f.close()
            raise
        self._rec = bytearray(1 + self.numel)
        self._x = memoryview(self._rec)[1:]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError("FileDataset index out of range")
        self._f.seek(16 + i * (1 + self.numel))
        if self._f.readinto(self._rec) != len(self._rec):
            raise ValueError("FileDataset: %s is truncated" % self.path)
        return self._x, self._rec[0]

    def close(self):
        self._f.close()

    @staticmethod
    def write(path, samples):
        """Write (x, label) samples to a .mtd file."""
        n = len(samples)
        numel = len(samples[0][0]) if n else 0
        with open(path, "wb") as f:
            f.write(MAGIC + struct.pack("<III", n, numel, 0))
            lb = bytearray(1)
            for i in range(n):
                s = samples[i]
                if not isinstance(s, (tuple, list)) or len(s) != 2:
                    raise TypeError("FileDataset.write: sample %d must be an (x, label) pair" % i)
                x, label = s
                if type(label) is not int or not 0 <= label <= 255:
                    raise ValueError("FileDataset.write: sample %d: label must be an int in 0..255, got %r"
                                     % (i, label))
                if isinstance(x, str) or len(x) != numel:
                    raise ValueError("FileDataset.write: sample %d: x must be an int8 buffer of %d values"
                                     % (i, numel))
                lb[0] = label
                f.write(lb)
                f.write(x)


class Subset:
    """samples[start:stop] without copying."""

    def __init__(self, samples, start, stop):
        if not 0 <= start <= stop <= len(samples):
            raise ValueError("Subset: need 0 <= start <= stop <= len(samples)")
        self.samples, self.start, self.stop = samples, start, stop

    def __len__(self):
        return self.stop - self.start

    def __getitem__(self, i):
        if not 0 <= i < self.stop - self.start:
            raise IndexError("Subset index out of range")
        return self.samples[self.start + i]
