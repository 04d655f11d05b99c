"""Plain nn.Modules: generators, discriminators, the vectorized teacher ensemble, downstream classifiers."""
from dpgen.nn.discriminator import ConditionalDiscriminator
from dpgen.nn.ensemble import TeacherEnsemble

__all__ = ["ConditionalDiscriminator", "TeacherEnsemble"]
