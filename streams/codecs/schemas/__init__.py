"""Schema codecs: a topic's key and value records, as their model and schema say, turned into JSON.

Decoding runs in the fetch processes, once per record, so everything here is free of Django and built from
plain, picklable specs (`spec.py`, which the control plane mirrors). The one module with I/O is `registry.py`, the
schema registry client the decoders ask for a record's schema; its answers are cached.

- `spec`: catalogs, models and topic models, as frozen dataclasses.
- `decoders`: `decoder_for(model, catalogs, topic, part)`, whose `decode(bytes)` gives JSON bytes.
- `errors`: `DecodeError` and its `Reason`s, `SchemaError`.
- `sources`: where schemas come from (`Catalogs`, the inline catalog); `registry`: the registry client;
  `registry_answers`: what its answers mean.
- `limits`: `Limits`, the bounds on the work one record may cost.
- `framing`: the registry's magic byte, schema id and Protobuf message indexes.
- `avro`, `protobuf`, `json_values`, `scalars`, `floats`: each model's bytes to JSON values; `avro_shape`: an Avro
  record walked against the limits before fastavro reads it.

The JSON each model gives is described in docs/schemas.md.
"""

from streams.codecs.schemas.decoders import Decoder, decoder_for
from streams.codecs.schemas.errors import DecodeError, Reason, SchemaError
from streams.codecs.schemas.limits import Limits
from streams.codecs.schemas.sources import Catalogs
from streams.codecs.schemas.spec import CatalogSpec, InlineSchema, ModelSpec, TopicModels, models_for

__all__ = [
    "CatalogSpec",
    "Catalogs",
    "DecodeError",
    "Decoder",
    "InlineSchema",
    "Limits",
    "ModelSpec",
    "Reason",
    "SchemaError",
    "TopicModels",
    "decoder_for",
    "models_for",
]
