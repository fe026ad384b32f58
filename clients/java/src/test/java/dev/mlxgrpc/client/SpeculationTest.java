package dev.mlxgrpc.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.mlxgrpc.v1.GenerateRequest;
import dev.mlxgrpc.v1.SpeculationMode;
import dev.mlxgrpc.v1.SpeculationOptions;
import org.junit.jupiter.api.Test;

/** The speculation helper builds the generated options (no server needed). */
class SpeculationTest {
  @Test
  void buildsTheRequestsSpeculationOptions() {
    SpeculationOptions ngram = SpeculationOptions.newBuilder()
        .setMode(SpeculationMode.SPECULATION_MODE_NGRAM).setNumDraftTokens(6).build();
    assertEquals(ngram, Speculation.ngram(6));
    assertEquals(ngram, Speculation.of(SpeculationMode.SPECULATION_MODE_NGRAM, 6));
    assertEquals(SpeculationMode.SPECULATION_MODE_DRAFT, Speculation.draft(8).getMode());
    assertEquals(8, Speculation.draft(8).getNumDraftTokens());
    assertEquals(SpeculationOptions.newBuilder().setMode(SpeculationMode.SPECULATION_MODE_OFF).build(),
        Speculation.off());
    assertEquals(SpeculationOptions.getDefaultInstance(),
        Speculation.of(SpeculationMode.SPECULATION_MODE_UNSPECIFIED, 0));
    GenerateRequest req = GenerateRequest.newBuilder().setText("x").setSpeculation(Speculation.ngram(6)).build();
    assertEquals(ngram, req.getSpeculation());
  }
}
