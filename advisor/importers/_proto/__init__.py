"""Generated protobuf code: a TensorFlow-free, wire-compatible subset of ``RunMetadata``.

``tf_runmetadata.proto`` is the source; ``tf_runmetadata_pb2.py`` is generated from it by
``scripts/regen_proto.sh`` and must not be edited by hand.
"""
