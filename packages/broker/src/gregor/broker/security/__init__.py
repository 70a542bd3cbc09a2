"""Who is on the other end of a connection: each listener's TLS and SASL (`listeners`), the
principal a certificate's DN maps to (`principal`), the SASL exchange (`sasl`) and the SCRAM
credentials it checks (`scram_credentials`)."""
