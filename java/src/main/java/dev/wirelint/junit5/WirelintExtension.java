package dev.wirelint.junit5;

import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.TestInstancePreConstructCallback;
import org.junit.jupiter.api.extension.TestInstanceFactoryContext;

/**
 * The JUnit 5 extension: {@code @ExtendWith(WirelintExtension.class)} or
 * {@link WirelintTest @WirelintTest} on a test class.
 *
 * <p>The first test class that has it starts one wirelint proxy for the
 * whole run (kept in the root context's store, so every test class shares
 * it) in front of {@code wirelint.upstream}, and points the system
 * properties named by {@code wirelint.properties} (by default
 * {@code spring.mongodb.uri} and {@code spring.data.mongodb.uri}) at it
 * before the class is instantiated, so before Spring loads its context,
 * whatever the order of the extensions. When the engine finishes, wirelint
 * is stopped, its report printed and written, and the run fails when a
 * finding reaches {@code wirelint.failOn}. Before each test wirelint is
 * told which test runs (its unique id, its source file and line), so that
 * findings name the tests whose operations showed them. See {@link
 * Wirelint} for the options and the static helpers.
 */
public final class WirelintExtension
    implements BeforeAllCallback, TestInstancePreConstructCallback, BeforeEachCallback, AfterEachCallback {

  @Override
  public void preConstructTestInstance(TestInstanceFactoryContext factoryContext, ExtensionContext context) {
    // With @TestInstance(PER_CLASS) the instance, and with it Spring's
    // context, comes before beforeAll.
    Session.of(context).startConfigured();
  }

  @Override
  public void beforeAll(ExtensionContext context) {
    Session.of(context).startConfigured();
  }

  @Override
  public void beforeEach(ExtensionContext context) {
    Session.of(context).mark(context);
  }

  @Override
  public void afterEach(ExtensionContext context) {
    Session.of(context).mark(null);
  }
}
