package dev.wirelint.junit5;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

class ClientUriTest {
  @Test
  void keeps_credentials_database_and_options_and_drops_the_way_to_the_database() {
    assertEquals(
        "mongodb://app:p%2Fw@127.0.0.1:4000/shop?authSource=admin&retryWrites=true",
        ClientUri.of(
            "mongodb+srv://app:p%2Fw@db.example.com/shop?replicaSet=rs0&tls=true&authSource=admin&retryWrites=true",
            "127.0.0.1:4000"));
  }

  @Test
  void a_replica_set_becomes_one_address() {
    assertEquals("mongodb://127.0.0.1:9/", ClientUri.of("mongodb://a:1,b:2", "127.0.0.1:9"));
    assertEquals("mongodb://127.0.0.1:9/test", ClientUri.of("mongodb://a:1/test?directConnection=true", "127.0.0.1:9"));
  }

  @Test
  void anything_else_is_refused() {
    assertThrows(IllegalArgumentException.class, () -> ClientUri.of("postgres://db/x", "127.0.0.1:9"));
  }
}
