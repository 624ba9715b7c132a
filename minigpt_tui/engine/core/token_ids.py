"""The fixed ids of our byte-level BPE: BOS, EOS, the 256 bytes from id 2, then merges."""

BOS = 0
EOS = 1
BYTE_OFFSET = 2
FIRST_MERGE_ID = BYTE_OFFSET + 256
